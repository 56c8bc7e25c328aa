// HfTokenizer: tokenizer.json read into its stages (hf_components.h), and the pipeline that runs
// them as `tokenizers`' Tokenizer::encode and ::decode do.
#include "qkv/text/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "hf_components.h"
#include "hf_unicode.h"
#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"

namespace qkv::text {

using namespace hf;

namespace {

// The bytes of the character at s[i]; the start of the one before s[end]; whether s[0, end) holds at
// least `chars` characters.
size_t char_bytes(std::string_view s, size_t i) {
  size_t n = 0;
  decode_at(s, i, &n);
  return n;
}
size_t char_start_before(std::string_view s, size_t end) {
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}
bool holds_chars(std::string_view s, size_t end, size_t chars) {
  for (size_t k = 0; k < chars; ++k) {
    if (end == 0) return false;
    end = char_start_before(s, end);
  }
  return true;
}

constexpr int64_t kMaxTokenizerBytes = 64 << 20;  // tokenizer.json, vocab.txt (Llama 3's: 9 MB)
constexpr int64_t kMaxConfigBytes = 4 << 20;      // tokenizer_config.json

}  // namespace

// (AddedToken and AddedMatcher are HfTokenizer::Impl's members' types, so not in the unnamed namespace:
// g++ warns of a class whose fields use it, where a unity build includes this file.)
struct AddedToken {
  std::string content;
  int32_t id;
  bool single_word, lstrip, rstrip, normalized, special;
};

// The added tokens that match one form of the text (the raw text, or the normalized text): the
// leftmost match, the longest among those that start there (Aho-Corasick's leftmost-longest).
class AddedMatcher {
 public:
  void add(std::string pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    auto& list = by_first_[static_cast<unsigned char>(pattern[0])];
    list.push_back({std::move(pattern), token});
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    any_ = true;
  }
  // `tokenizers`' AddedVocabulary::split_with_indices on each piece that is not a token yet:
  // single_word tokens only between non-word characters, lstrip/rstrip take the whitespace beside
  // them into the token.
  void split(Pieces& pieces) const {
    if (!any_) return;
    Pieces out;
    for (auto& p : pieces) {
      if (p.id >= 0) {
        out.push_back(std::move(p));
        continue;
      }
      const std::string& s = p.text;
      size_t from = 0;  // where the last piece ended
      size_t at = 0;    // where the search goes on
      while (at < s.size()) {
        const AddedToken* tok = nullptr;
        size_t b = 0, e = 0;
        for (size_t i = at; i < s.size() && !tok; ++i) {
          for (const auto& [pat, t] : by_first_[static_cast<unsigned char>(s[i])])
            if (s.compare(i, pat.size(), pat) == 0) {
              tok = t, b = i, e = i + pat.size();
              break;
            }
        }
        if (!tok) break;
        at = e;
        if (tok->single_word && ((b > 0 && word_char_before(s, b)) || (e < s.size() && word_char_at(s, e)))) continue;
        if (tok->lstrip) {
          size_t nb = b;
          while (nb > 0) {
            size_t k = nb - 1;
            while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
            size_t n = 0;
            if (!is_whitespace(decode_at(s, k, &n))) break;
            nb = k;
          }
          b = std::max(nb, from);
        }
        if (tok->rstrip) {
          size_t n = 0;
          while (e < s.size() && is_whitespace(decode_at(s, e, &n))) e += n;
          at = e;
        }
        if (b > from) out.push_back(p.slice(from, b, -1, p.at_start && from == 0));
        out.push_back(p.slice(b, e, tok->id, false));
        from = e;
      }
      if (from < s.size()) out.push_back(p.slice(from, s.size(), -1, p.at_start && from == 0));
    }
    pieces = std::move(out);
  }

 private:
  static bool word_char(char32_t c) { return c == '_' || is_alphanumeric(c) || is_mark(c); }
  static bool word_char_at(const std::string& s, size_t i) {
    size_t n = 0;
    return word_char(decode_at(s, i, &n));
  }
  static bool word_char_before(const std::string& s, size_t i) {
    size_t k = i - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    return word_char_at(s, k);
  }
  std::vector<std::pair<std::string, const AddedToken*>> by_first_[256];
  bool any_ = false;
};

struct HfTokenizer::Impl {
  std::string file;  // for errors
  std::string json_text, config_text;
  std::vector<AddedToken> added;  // (its address is kept by the matchers: filled before them)
  std::map<int32_t, const AddedToken*> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::set<int32_t> special_ids;
  AddedMatcher raw_matcher, normalized_matcher;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  // A ByteLevel pre-tokenizer without add_prefix_space: pre-split words get their space (encode_words).
  bool words_need_prefix_space = false;
  std::unique_ptr<Decoder> decoder;
  int32_t bos = -1, eos = -1, pad = -1, unk = -1, cls = -1, sep = -1, mask = -1;
  std::optional<bool> token_types;  // returns_token_type_ids()
  std::optional<int64_t> model_max_length;

  int32_t token_to_id(std::string_view t) const {
    auto it = added_by_content.find(std::string(t));
    return it != added_by_content.end() ? it->second : model->vocab().find(t);
  }

  // The tokens of one sequence: added tokens, normalizer, added tokens again, pre-tokenizer, model;
  // and, tracked, each token's bytes in `input` (made valid UTF-8) and its word (the index of its
  // piece: `tokenizers`' word ids).
  Encoded tokenize(std::string_view input, bool tracked = false) const {
    const std::string text = valid_utf8(input);
    QKV_CHECK(!tracked || text.size() < (size_t{1} << 32), "tokenizer: offsets of a text of 4 GiB or more");
    const Budget budget(text.size());
    Pieces pieces;
    if (!text.empty()) {
      pieces.push_back({text, -1, true, {}});
      if (tracked) {  // each byte: its character's bytes
        auto& align = pieces.back().align;
        align.reserve(text.size());
        for (size_t i = 0, n = 0; i < text.size(); i += n) {
          decode_at(text, i, &n);
          align.insert(align.end(), n, Align{static_cast<uint32_t>(i), static_cast<uint32_t>(i + n)});
        }
      }
    }
    raw_matcher.split(pieces);
    if (normalizer) {
      Pieces kept;
      for (auto& p : pieces) {
        if (p.id < 0) normalizer->normalize(p, budget);
        if (p.id >= 0 || !p.text.empty()) kept.push_back(std::move(p));
      }
      pieces = std::move(kept);
    }
    normalized_matcher.split(pieces);
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces, budget);
    Encoded out;
    out.tracked = tracked;
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t w = 0; w < pieces.size(); ++w) {
      const Piece& p = pieces[w];
      const size_t first = out.ids.size();
      spans.clear();
      if (p.id >= 0) {
        out.ids.push_back(p.id);
        spans.push_back({0, p.text.size()});
      } else {
        model->tokenize(p.text, out.ids, tracked ? &spans : nullptr);
      }
      if (!tracked) continue;
      // a token's bytes of the piece → of the input: from its first byte's Align to its last's
      // (tokenizers' convert_offsets; an empty span stays where it is)
      for (auto [b, e] : spans) {
        if (b < e && e <= p.align.size())
          out.offsets.push_back({p.align[b].first, p.align[e - 1].second});
        else
          out.offsets.push_back({b, e});
      }
      out.words.insert(out.words.end(), out.ids.size() - first, static_cast<int32_t>(w));
    }
    out.type_ids.assign(out.ids.size(), 0);
    return out;
  }

  // RobertaProcessing's and ByteLevel's trim_offsets on one sequence (`text` its input): the spaces a
  // token begins or ends with (GPT-2's "Ġ" or whitespace) left out of its offsets, counted in
  // characters of the text as tokenizers counts them; a first token keeps the one space
  // add_prefix_space gave it.
  void trim_offsets(Encoded& e, std::string_view input, bool add_prefix_space) const {
    const std::string text = valid_utf8(input);
    static const std::string space = byte_to_unicode()[' '];
    for (size_t i = 0; i < e.ids.size(); ++i) {
      const std::string token = id_to_token(e.ids[i]);
      auto spacey = [&](size_t at, size_t* n) {
        const char32_t c = decode_at(token, at, n);
        return token.compare(at, space.size(), space) == 0 || is_whitespace(c);
      };
      size_t leading = 0, trailing = 0, n = 0;
      for (size_t at = 0; at < token.size() && spacey(at, &n); at += n) ++leading;
      for (size_t end = token.size(); end > 0;) {
        size_t k = end - 1;
        while (k > 0 && (static_cast<unsigned char>(token[k]) & 0xC0) == 0x80) --k;
        if (!spacey(k, &n)) break;
        ++trailing, end = k;
      }
      auto& [b, end] = e.offsets[i];
      if (leading > 0 && !((i == 0 || b == 0) && add_prefix_space && leading == 1))
        for (size_t k = 0; k < leading && b < end; ++k) b = std::min(end, b + char_bytes(text, b));
      if (trailing > 0 && holds_chars(text, end, trailing))
        for (size_t k = 0; k < trailing && end > b; ++k) end = char_start_before(text, end);
    }
  }

  std::string id_to_token(int32_t id) const {
    auto it = added_by_id.find(id);
    if (it != added_by_id.end()) return it->second->content;
    const auto& tokens = model->vocab().tokens;
    return id >= 0 && static_cast<size_t>(id) < tokens.size() ? tokens[static_cast<size_t>(id)] : std::string();
  }

  // The special tokens the post-processor puts around one sequence (pair: two).
  size_t added_tokens(bool pair) const {
    size_t added = 0;
    if (post_processor)
      for (const auto& s : post_processor->process(pair ? std::vector<Encoded>(2) : std::vector<Encoded>(1), true))
        added += s.ids.size();
    return added;
  }

  // Sequences through trim_offsets (tracked) and the post-processor, joined.
  HfEncoding finish(std::vector<Encoded> seqs, std::string_view a, const std::string_view* b, bool add_special_tokens,
                    bool trim = true) const {
    if (trim && seqs[0].tracked && post_processor)
      if (auto trim = post_processor->trims_offsets())
        for (size_t i = 0; i < seqs.size(); ++i) trim_offsets(seqs[i], i == 0 ? a : *b, trim->add_prefix_space);
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].type_ids.assign(seqs[i].ids.size(), static_cast<int32_t>(i));
      if (seqs[i].tracked) seqs[i].sequences.assign(seqs[i].ids.size(), static_cast<int32_t>(i));
    }
    if (post_processor) seqs = post_processor->process(std::move(seqs), add_special_tokens);
    HfEncoding out;
    for (const auto& s : seqs) {
      out.ids.insert(out.ids.end(), s.ids.begin(), s.ids.end());
      out.token_type_ids.insert(out.token_type_ids.end(), s.type_ids.begin(), s.type_ids.end());
      out.offsets.insert(out.offsets.end(), s.offsets.begin(), s.offsets.end());
      out.word_ids.insert(out.word_ids.end(), s.words.begin(), s.words.end());
      out.sequence_ids.insert(out.sequence_ids.end(), s.sequences.begin(), s.sequences.end());
    }
    return out;
  }

  static void cut(Encoded& e, size_t n) {
    if (e.ids.size() <= n) return;
    e.ids.resize(n);
    e.type_ids.resize(n);
    if (!e.tracked) return;
    e.offsets.resize(n);
    e.words.resize(n);
  }

  HfEncoding encode(std::string_view a, const std::string_view* b, bool add_special_tokens, int64_t max_length = -1,
                    HfTokenizer::Truncation truncation = HfTokenizer::Truncation::longest_first,
                    bool tracked = false) const {
    std::vector<Encoded> seqs;
    seqs.push_back(tokenize(a, tracked));
    if (max_length >= 0 && !b) {
      // transformers' truncation of one sequence: the text's own tokens cut so that they and the
      // special tokens the post-processor adds fit max_length
      const size_t added = add_special_tokens ? added_tokens(false) : 0;
      cut(seqs[0], static_cast<size_t>(max_length) > added ? static_cast<size_t>(max_length) - added : 0);
    }
    if (b) seqs.push_back(tokenize(*b, tracked));
    if (max_length >= 0 && b) {
      // tokenizers' "longest_first" truncation of a pair (transformers' truncation=True): with n1 ≤ n2
      // the shorter kept whole where the room allows, the longer cut to what is left; where both
      // must go, half the room each (the odd token to the longer)
      const size_t added = add_special_tokens ? added_tokens(true) : 0;
      const size_t room = static_cast<size_t>(max_length) > added ? static_cast<size_t>(max_length) - added : 0;
      size_t n1 = seqs[0].ids.size(), n2 = seqs[1].ids.size();
      if (truncation == HfTokenizer::Truncation::only_first) {
        // "only_first": the first sequence cut to what the second leaves, where it leaves a token
        if (n1 + n2 > room && n2 < room) cut(seqs[0], room - n2);
      } else if (n1 + n2 > room) {
        const bool swap = n1 > n2;
        if (swap) std::swap(n1, n2);
        n2 = n1 > room ? n1 : std::max(n1, room - n1);
        if (n1 + n2 > room) n1 = room / 2, n2 = n1 + room % 2;
        if (swap) std::swap(n1, n2);
        cut(seqs[0], n1);
        cut(seqs[1], n2);
      }
    }
    return finish(std::move(seqs), a, b, add_special_tokens);
  }

  // Words already split (transformers' is_split_into_words=True; tokenizers' pre-tokenized input):
  // each word through the normalizer, pre-tokenizer and model alone (its offsets its own, trimmed
  // as a sequence's are), its tokens' word id its index; the words' tokens cut to what the special
  // tokens leave of max_length (≥ 0), then through the post-processor. prefix_space: a space before
  // each word (a ByteLevel tokenizer loaded with add_prefix_space=True, as transformers asks of one).
  HfEncoding encode_words(const std::vector<std::string>& words, int64_t max_length, bool prefix_space) const {
    Encoded all;
    all.tracked = true;
    const auto trim = post_processor ? post_processor->trims_offsets() : std::nullopt;
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string word = prefix_space ? " " + words[i] : words[i];
      Encoded e = tokenize(word, true);
      if (trim) trim_offsets(e, word, trim->add_prefix_space);
      all.ids.insert(all.ids.end(), e.ids.begin(), e.ids.end());
      all.offsets.insert(all.offsets.end(), e.offsets.begin(), e.offsets.end());
      all.words.insert(all.words.end(), e.ids.size(), static_cast<int32_t>(i));
    }
    all.type_ids.assign(all.ids.size(), 0);
    if (max_length >= 0) {
      const size_t added = added_tokens(false);
      cut(all, static_cast<size_t>(max_length) > added ? static_cast<size_t>(max_length) - added : 0);
    }
    std::vector<Encoded> seqs;
    seqs.push_back(std::move(all));
    return finish(std::move(seqs), {}, nullptr, true, /*trim=*/false);
  }

  // tokenizers' "only_second" truncation with overflowing windows (Encoding::truncate): the pair's
  // second sequence cut into windows of the room the first leaves, each `stride` tokens into the
  // one before, and each window with the first sequence through the post-processor.
  std::vector<HfEncoding> windows(std::string_view a, std::string_view b, int64_t max_length, int64_t stride) const {
    Encoded first = tokenize(a, true), second = tokenize(b, true);
    const size_t added = added_tokens(true), need = first.ids.size() + added;
    if (max_length < 0 || static_cast<size_t>(max_length) <= need)
      throw Error("tokenizer: the question takes " + std::to_string(first.ids.size()) +
                  " tokens and the special tokens " + std::to_string(added) + ": no room for the text in " +
                  std::to_string(max_length));
    const size_t room = static_cast<size_t>(max_length) - need;
    if (stride < 0 || (second.ids.size() > room && static_cast<size_t>(stride) >= room))
      throw Error("tokenizer: the stride " + std::to_string(stride) + " must be less than the room for the text (" +
                  std::to_string(room) + " tokens)");
    const size_t n = second.ids.size(), step = room - static_cast<size_t>(stride);
    std::vector<HfEncoding> out;
    for (size_t start = 0;; start += step) {
      const size_t stop = std::min(start + room, n);
      Encoded part;
      part.tracked = true;
      part.ids.assign(second.ids.begin() + static_cast<std::ptrdiff_t>(start),
                      second.ids.begin() + static_cast<std::ptrdiff_t>(stop));
      part.offsets.assign(second.offsets.begin() + static_cast<std::ptrdiff_t>(start),
                          second.offsets.begin() + static_cast<std::ptrdiff_t>(stop));
      part.words.assign(second.words.begin() + static_cast<std::ptrdiff_t>(start),
                        second.words.begin() + static_cast<std::ptrdiff_t>(stop));
      out.push_back(finish({first, std::move(part)}, a, &b, true));
      if (stop == n) break;
    }
    return out;
  }
};

namespace {

AddedToken read_added_token(const json& j, const Field& f) {
  AddedToken t;
  t.id = static_cast<int32_t>(get_int(j, "id", -1, 0, (int64_t{1} << 31) - 1, f));
  if (t.id < 0) f.at("id").fail("missing");
  t.content = need_string(j, "content", f);
  if (t.content.empty()) f.at("content").fail("an empty token");
  if (valid_utf8(t.content) != t.content) f.at("content").fail("not valid UTF-8");
  t.special = get_bool(j, "special", false, f);
  t.single_word = get_bool(j, "single_word", false, f);
  t.lstrip = get_bool(j, "lstrip", false, f);
  t.rstrip = get_bool(j, "rstrip", false, f);
  t.normalized = get_bool(j, "normalized", !t.special, f);
  return t;
}

// A special token's name in tokenizer_config.json: "<s>" or {"content": "<s>", …}.
std::string config_token(const json& config, const char* key, const std::string& file) {
  const json* v = find(config, key);
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return need_string(*v, "content", Field{file, key});
  Field{file, key}.fail("expected a string or {\"content\": …}");
}

std::shared_ptr<const HfTokenizer::Impl> build(std::string_view text, std::string_view config_text, const std::string& what) {
  auto impl = std::make_shared<HfTokenizer::Impl>();
  HfTokenizer::Impl& t = *impl;
  t.file = what;
  t.json_text = std::string(text);
  t.config_text = std::string(config_text);
  const Field root{t.file, ""};
  json j;
  try {
    j = io::parse_json(text, what);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not JSON: " + e.what());
  }
  if (!j.is_object()) root.fail("expected a JSON object, got " + std::string(j.type_name()));
  static const std::set<std::string> known = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                              "pre_tokenizer", "post_processor", "decoder", "model"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) root.at(it.key()).fail("unknown field");
  // the model
  const json& m = need(j, "model", root);
  const std::string type = type_of(m, root.at("model"));
  if (type == "BPE") t.model = make_bpe(m, root.at("model"));
  else if (type == "WordPiece") t.model = make_wordpiece(m, root.at("model"));
  else if (type == "Unigram")
    t.model = make_unigram(m, root.at("model"));
  else
    root.at("model").at("type").fail("model \"" + type + "\" is not supported (BPE, WordPiece and Unigram are)");
  if (const json* n = find(j, "normalizer")) t.normalizer = make_normalizer(*n, root.at("normalizer"));
  if (const json* p = find(j, "pre_tokenizer")) {
    t.pre_tokenizer = make_pre_tokenizer(*p, root.at("pre_tokenizer"));
    // (make_pre_tokenizer checked the shapes read here)
    auto byte_level_without_space = [](const json& q) {
      return q.is_object() && q.value("type", "") == "ByteLevel" && !q.value("add_prefix_space", true);
    };
    t.words_need_prefix_space = byte_level_without_space(*p);
    if (p->is_object() && p->value("type", "") == "Sequence" && p->contains("pretokenizers") &&
        (*p)["pretokenizers"].is_array())
      for (const json& q : (*p)["pretokenizers"]) t.words_need_prefix_space |= byte_level_without_space(q);
  }
  if (const json* p = find(j, "post_processor")) t.post_processor = make_post_processor(*p, root.at("post_processor"));
  if (const json* d = find(j, "decoder")) t.decoder = make_decoder(*d, root.at("decoder"));
  // the added tokens
  if (const json* a = find(j, "added_tokens")) {
    if (!a->is_array()) root.at("added_tokens").fail("expected an array");
    for (size_t i = 0; i < a->size(); ++i) t.added.push_back(read_added_token((*a)[i], root.at("added_tokens").at(i)));
  }
  for (const AddedToken& a : t.added) {
    t.added_by_id[a.id] = &a;
    t.added_by_content[a.content] = a.id;
    if (a.special) t.special_ids.insert(a.id);
    if (a.normalized)
      t.normalized_matcher.add(t.normalizer ? t.normalizer->normalized(a.content, Budget(a.content.size())) : a.content,
                               &a);
    else t.raw_matcher.add(a.content, &a);
  }
  // the special tokens' ids
  json config;
  if (!config_text.empty()) {
    const std::string cfile = "tokenizer_config.json";
    try {
      config = io::parse_json(config_text, cfile);
    } catch (const nlohmann::json::exception& e) {
      throw Error(cfile + ": not JSON: " + e.what());
    }
    if (!config.is_object()) Field{cfile, ""}.fail("expected a JSON object");
  }
  auto resolve = [&](const char* key, std::initializer_list<const char*> usual) {
    const std::string name = config.is_object() ? config_token(config, key, "tokenizer_config.json") : std::string();
    if (!name.empty()) return t.token_to_id(name);
    if (config.is_object() && find(config, key)) return -1;
    for (const char* u : usual) {
      auto it = t.added_by_content.find(u);
      if (it != t.added_by_content.end() && t.special_ids.count(it->second)) return it->second;
    }
    return -1;
  };
  t.bos = resolve("bos_token", {"<s>", "<|begin_of_text|>", "<bos>", "<|endoftext|>"});
  t.eos = resolve("eos_token", {"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>"});
  t.pad = resolve("pad_token", {"<pad>", "[PAD]", "<|finetune_right_pad_id|>"});
  t.unk = resolve("unk_token", {"<unk>", "[UNK]"});
  if (t.unk < 0 && !t.model->unk_token.empty()) t.unk = t.token_to_id(t.model->unk_token);
  t.cls = resolve("cls_token", {"[CLS]", "<cls>"});
  t.sep = resolve("sep_token", {"[SEP]", "<sep>"});
  t.mask = resolve("mask_token", {"[MASK]", "<mask>"});
  // model_max_length: an integer (1e30, transformers' "none", is read as a float)
  if (config.is_object())
    if (const json* n = find(config, "model_max_length"); n && n->is_number_integer() && n->get<int64_t>() > 0)
      t.model_max_length = n->get<int64_t>();
  // model_input_names: the config's list, else its tokenizer class's (transformers 5's class attributes)
  if (config.is_object()) {
    if (const json* names = find(config, "model_input_names"); names && names->is_array()) {
      t.token_types = std::find(names->begin(), names->end(), json("token_type_ids")) != names->end();
    } else if (const json* cls = find(config, "tokenizer_class"); cls && cls->is_string()) {
      static const std::set<std::string> with_types = {"BertTokenizer",
                                                       "ElectraTokenizer",
                                                       "ConvBertTokenizer",
                                                       "MobileBertTokenizer",
                                                       "SqueezeBertTokenizer",
                                                       "DebertaTokenizer",
                                                       "DebertaV2Tokenizer",
                                                       "FNetTokenizer",
                                                       "CanineTokenizer",
                                                       "LayoutLMv2Tokenizer",
                                                       "MarkupLMTokenizer",
                                                       "TapasTokenizer",
                                                       "DPRContextEncoderTokenizer",
                                                       "DPRQuestionEncoderTokenizer"};
      std::string name = cls->get<std::string>();
      if (name.ends_with("Fast")) name.resize(name.size() - 4);
      t.token_types = with_types.count(name) > 0;
    }
  }
  return impl;
}

// vocab.txt (+ tokenizer_config.json) as the tokenizer.json transformers' BertConverter writes.
std::string bert_json_from_vocab(const std::string& vocab_txt, const std::string& config_text, const std::string& what) {
  json config = json::object();
  if (!config_text.empty()) {
    try {
      config = io::parse_json(config_text, "tokenizer_config.json");
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("tokenizer_config.json: not JSON: ") + e.what());
    }
    if (!config.is_object()) Field{"tokenizer_config.json", ""}.fail("expected a JSON object");
  }
  const std::string cfile = "tokenizer_config.json";
  const Field cf{cfile, ""};
  json vocab = json::object();
  size_t line = 0, start = 0;
  while (start < vocab_txt.size()) {
    size_t end = vocab_txt.find('\n', start);
    if (end == std::string::npos) end = vocab_txt.size();
    std::string token = vocab_txt.substr(start, end - start);
    if (!token.empty() && token.back() == '\r') token.pop_back();
    if (valid_utf8(token) != token) throw Error(what + ": line " + std::to_string(line + 1) + " is not valid UTF-8");
    vocab[token] = line++;
    start = end + 1;
  }
  auto name = [&](const char* key, const char* fallback) {
    std::string n = config_token(config, key, cfile);
    return n.empty() ? std::string(fallback) : n;
  };
  const std::string unk = name("unk_token", "[UNK]"), cls = name("cls_token", "[CLS]"), sep = name("sep_token", "[SEP]"),
                    pad = name("pad_token", "[PAD]"), mask = name("mask_token", "[MASK]");
  const bool lower = get_bool(config, "do_lower_case", true, cf);
  json strip = nullptr;
  if (find(config, "strip_accents")) strip = get_bool(config, "strip_accents", false, cf);
  json added = json::array();
  for (const auto& s : {pad, unk, cls, sep, mask}) {
    auto it = vocab.find(s);
    if (it == vocab.end()) throw Error(what + ": the special token \"" + s + "\" is not in it");
    added.push_back({{"id", *it}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true},
                      {"handle_chinese_chars", get_bool(config, "tokenize_chinese_chars", true, cf)},
                      {"strip_accents", strip}, {"lowercase", lower}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", cls}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                {{"SpecialToken", {{"id", sep}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", cls}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", sep}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
                              {{"SpecialToken", {{"id", sep}, {"type_id", 1}}}}})},
        {"special_tokens", {{cls, {{"id", cls}, {"ids", {vocab[cls]}}, {"tokens", {cls}}}},
                            {sep, {{"id", sep}, {"ids", {vocab[sep]}}, {"tokens", {sep}}}}}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", unk}, {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
  return j.dump();
}

}  // namespace

HfTokenizer HfTokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json, const std::string& what) {
  HfTokenizer t;
  t.impl_ = build(tokenizer_json, tokenizer_config_json, what);
  return t;
}

HfTokenizer HfTokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string json_path = dir + "/tokenizer.json", config_path = dir + "/tokenizer_config.json",
                    vocab_path = dir + "/vocab.txt";
  std::error_code ec;
  const std::string config = fs::exists(config_path, ec) ? io::read_file(config_path, kMaxConfigBytes, "the tokenizer config")
                                                         : std::string();
  if (fs::exists(json_path, ec))
    return from_json(io::read_file(json_path, kMaxTokenizerBytes, "the tokenizer"), config, json_path);
  if (fs::exists(vocab_path, ec)) {
    const std::string built = bert_json_from_vocab(io::read_file(vocab_path, kMaxTokenizerBytes, "the vocabulary"), config, vocab_path);
    return from_json(built, config, vocab_path);
  }
  throw Error("'" + dir + "' has no tokenizer.json and no vocab.txt");
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, nullptr, add_special_tokens).ids;
}

HfEncoding HfTokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, nullptr, add_special_tokens, -1, Truncation::longest_first, true);
}

HfEncoding HfTokenizer::encode_pair_with_offsets(std::string_view text, std::string_view pair,
                                                 bool add_special_tokens) const {
  return impl_->encode(text, &pair, add_special_tokens, -1, Truncation::longest_first, true);
}

std::vector<HfEncoding> HfTokenizer::encode_pair_windows(std::string_view text, std::string_view pair,
                                                         int64_t max_length, int64_t stride) const {
  return impl_->windows(text, pair, max_length, stride);
}

HfEncoding HfTokenizer::encode_words(const std::vector<std::string>& words, int64_t max_length) const {
  return impl_->encode_words(words, max_length, impl_->words_need_prefix_space);
}

std::vector<int32_t> HfTokenizer::encode_truncated(std::string_view text, int64_t max_length) const {
  return impl_->encode(text, nullptr, true, std::max<int64_t>(max_length, 0)).ids;
}

HfEncoding HfTokenizer::encode_pair(std::string_view text, std::string_view pair, bool add_special_tokens) const {
  return impl_->encode(text, &pair, add_special_tokens);
}

HfEncoding HfTokenizer::encode_pair_truncated(std::string_view text, std::string_view pair, int64_t max_length,
                                              Truncation truncation) const {
  return impl_->encode(text, &pair, true, std::max<int64_t>(max_length, 0), truncation);
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && impl_->special_ids.count(id)) continue;
    std::string t = id_to_token(id);
    if (!t.empty() || (id >= 0 && impl_->model->vocab().find("") == id)) tokens.push_back(std::move(t));
  }
  return convert_tokens_to_string(std::move(tokens));
}

std::string HfTokenizer::convert_tokens_to_string(std::vector<std::string> tokens) const {
  if (!impl_->decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  size_t bytes = 0;
  for (const auto& t : tokens) bytes += t.size();
  const Budget budget(bytes);
  std::string out;
  for (const auto& s : impl_->decoder->decode_chain(std::move(tokens), budget)) out += s;
  return out;
}

int32_t HfTokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

std::string HfTokenizer::id_to_token(int32_t id) const { return impl_->id_to_token(id); }

int64_t HfTokenizer::vocab_size() const {
  int64_t n = static_cast<int64_t>(impl_->model->vocab().tokens.size());
  if (!impl_->added_by_id.empty()) n = std::max<int64_t>(n, impl_->added_by_id.rbegin()->first + 1);
  return n;
}

std::string HfTokenizer::continuing_subword_prefix() const { return impl_->model->continuing_subword_prefix(); }
bool HfTokenizer::is_special(int32_t id) const { return impl_->special_ids.count(id) > 0; }
int32_t HfTokenizer::bos_token_id() const { return impl_->bos; }
int32_t HfTokenizer::eos_token_id() const { return impl_->eos; }
int32_t HfTokenizer::pad_token_id() const { return impl_->pad; }
int32_t HfTokenizer::unk_token_id() const { return impl_->unk; }
int32_t HfTokenizer::cls_token_id() const { return impl_->cls; }
int32_t HfTokenizer::sep_token_id() const { return impl_->sep; }
int32_t HfTokenizer::mask_token_id() const { return impl_->mask; }
const std::string& HfTokenizer::tokenizer_json() const { return impl_->json_text; }
const std::string& HfTokenizer::tokenizer_config_json() const { return impl_->config_text; }

std::optional<bool> HfTokenizer::returns_token_type_ids() const { return impl_->token_types; }
std::optional<int64_t> HfTokenizer::model_max_length() const { return impl_->model_max_length; }

}  // namespace qkv::text
