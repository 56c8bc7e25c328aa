// Post-processors of tokenizer.json: where the special tokens go around one sequence or a pair, and
// the token types. TemplateProcessing (its "single" and "pair" templates), BertProcessing
// ([CLS] A [SEP] B [SEP], types 0 then 1), RobertaProcessing (<s> A </s> </s> B </s>, types 0), ByteLevel
// (offsets only: nothing to do on ids),
// Sequence; others refused by name.
#include <map>

#include "hf_components.h"

namespace qkv::text::hf {

// As in HF's tokenizers (tokenizers.processors.*): the four families of components share names
// (Strip, Replace, Sequence, ByteLevel, Metaspace), and a unity build compiles them in one unit.
Encoded Encoded::specials(const std::vector<int32_t>& ids, int32_t type_id, bool tracked) {
  Encoded e;
  e.tracked = tracked;
  for (int32_t id : ids) e.push_special(id);
  e.type_ids.assign(ids.size(), type_id);
  return e;
}

void Encoded::push_special(int32_t id) {
  ids.push_back(id);
  type_ids.push_back(type_ids.empty() ? 0 : type_ids.back());
  if (!tracked) return;
  offsets.push_back({0, 0});
  words.push_back(-1);
  sequences.push_back(-1);
}

void Encoded::push_special_front(int32_t id) {
  ids.insert(ids.begin(), id);
  type_ids.insert(type_ids.begin(), type_ids.empty() ? 0 : type_ids.front());
  if (!tracked) return;
  offsets.insert(offsets.begin(), {0, 0});
  words.insert(words.begin(), -1);
  sequences.insert(sequences.begin(), -1);
}

namespace post_processors {
namespace {

bool tracked(const std::vector<Encoded>& seqs) { return !seqs.empty() && seqs[0].tracked; }

class TemplateProcessing final : public PostProcessor {
 public:
  TemplateProcessing(const json& j, const Field& f) {
    const json& specials = need(j, "special_tokens", f);
    if (!specials.is_object()) f.at("special_tokens").fail("expected an object");
    for (auto it = specials.begin(); it != specials.end(); ++it) {
      const Field sf = f.at("special_tokens").at(it.key());
      const json& ids = need(it.value(), "ids", sf);
      if (!ids.is_array()) sf.at("ids").fail("expected an array of ids");
      std::vector<int32_t> v;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 || ids[i].get<int64_t>() >= (int64_t{1} << 31) ||
            (ids[i].is_number_unsigned() && ids[i].get<uint64_t>() >= (1ull << 31)))
          sf.at("ids").at(i).fail("expected an id in [0, 2^31), got " + ids[i].dump().substr(0, 40));
        v.push_back(static_cast<int32_t>(ids[i].get<int64_t>()));
      }
      specials_[it.key()] = std::move(v);
    }
    single_ = read_template(need(j, "single", f), f.at("single"));
    pair_ = read_template(need(j, "pair", f), f.at("pair"));
  }

  std::vector<Encoded> process(std::vector<Encoded> seqs, bool add_special_tokens) const override {
    const auto& tpl = seqs.size() == 2 ? pair_ : single_;
    std::vector<Encoded> out;
    for (const Item& item : tpl) {
      if (item.sequence >= 0) {
        if (static_cast<size_t>(item.sequence) >= seqs.size()) continue;
        Encoded s = seqs[static_cast<size_t>(item.sequence)];
        s.type_ids.assign(s.ids.size(), item.type_id);
        out.push_back(std::move(s));
      } else if (add_special_tokens) {
        out.push_back(Encoded::specials(specials_.at(item.special), item.type_id, tracked(seqs)));
      }
    }
    return out;
  }

 private:
  struct Item {
    int sequence = -1;  // 0: $A, 1: $B; -1: the special token `special`
    std::string special;
    int32_t type_id = 0;
  };
  std::vector<Item> read_template(const json& t, const Field& f) const {
    if (!t.is_array()) f.fail("expected an array");
    std::vector<Item> items;
    for (size_t i = 0; i < t.size(); ++i) {
      const Field pf = f.at(i);
      Item item;
      if (const json* s = find(t[i], "Sequence")) {
        const std::string id = need_string(*s, "id", pf.at("Sequence"));
        if (id != "A" && id != "B") pf.at("Sequence").at("id").fail("expected \"A\" or \"B\", got \"" + id + "\"");
        item.sequence = id == "A" ? 0 : 1;
        item.type_id = static_cast<int32_t>(get_int(*s, "type_id", 0, 0, 1 << 30, pf.at("Sequence")));
      } else if (const json* s = find(t[i], "SpecialToken")) {
        item.special = need_string(*s, "id", pf.at("SpecialToken"));
        if (!specials_.count(item.special))
          pf.at("SpecialToken").at("id").fail("\"" + item.special + "\" is not in special_tokens");
        item.type_id = static_cast<int32_t>(get_int(*s, "type_id", 0, 0, 1 << 30, pf.at("SpecialToken")));
      } else {
        pf.fail("expected {\"Sequence\": …} or {\"SpecialToken\": …}");
      }
      items.push_back(std::move(item));
    }
    return items;
  }
  std::map<std::string, std::vector<int32_t>> specials_;
  std::vector<Item> single_, pair_;
};

class BertProcessing final : public PostProcessor {
 public:
  BertProcessing(const json& j, const Field& f) : cls_(read(j, "cls", f)), sep_(read(j, "sep", f)) {}
  std::vector<Encoded> process(std::vector<Encoded> seqs, bool add_special_tokens) const override {
    if (!add_special_tokens) return seqs;
    std::vector<Encoded> out;
    out.push_back(Encoded::specials({cls_}, 0, tracked(seqs)));
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto type = static_cast<int32_t>(i);
      Encoded s = seqs[i];
      s.push_special(sep_);
      s.type_ids.assign(s.ids.size(), type);
      out.push_back(std::move(s));
    }
    return out;
  }

 public:
  static int32_t read(const json& j, const char* key, const Field& f) {  // ["[CLS]", 101]
    const json& v = need(j, key, f);
    if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer() || v[1].get<int64_t>() < 0 ||
        v[1].get<int64_t>() >= (int64_t{1} << 31) || (v[1].is_number_unsigned() && v[1].get<uint64_t>() >= (1ull << 31)))
      f.at(key).fail("expected [token, id]");
    return static_cast<int32_t>(v[1].get<int64_t>());
  }
  int32_t cls_, sep_;
};

// RoBERTa's: <s> A </s> and <s> A </s> </s> B </s>, every token type 0; trim_offsets (default
// true) and add_prefix_space (default true) as ByteLevel's below.
class RobertaProcessing final : public PostProcessor {
 public:
  RobertaProcessing(const json& j, const Field& f)
      : cls_(BertProcessing::read(j, "cls", f)),
        sep_(BertProcessing::read(j, "sep", f)),
        trim_(get_bool(j, "trim_offsets", true, f)),
        prefix_space_(get_bool(j, "add_prefix_space", true, f)) {}
  std::vector<Encoded> process(std::vector<Encoded> seqs, bool add_special_tokens) const override {
    if (!add_special_tokens) return seqs;
    std::vector<Encoded> out;
    out.push_back(Encoded::specials({cls_}, 0, tracked(seqs)));
    for (size_t i = 0; i < seqs.size(); ++i) {
      Encoded s = seqs[i];
      if (i > 0) s.push_special_front(sep_);
      s.push_special(sep_);
      s.type_ids.assign(s.ids.size(), 0);
      out.push_back(std::move(s));
    }
    return out;
  }
  std::optional<Trim> trims_offsets() const override {
    return trim_ ? std::optional<Trim>(Trim{prefix_space_}) : std::nullopt;
  }

 private:
  int32_t cls_, sep_;
  bool trim_, prefix_space_;
};

// ByteLevel's: the ids as they are; trim_offsets (default true) takes the spaces a token begins and
// ends with out of its offsets.
class ByteLevel final : public PostProcessor {
 public:
  ByteLevel(const json& j, const Field& f)
      : trim_(get_bool(j, "trim_offsets", true, f)), prefix_space_(get_bool(j, "add_prefix_space", true, f)) {}
  std::vector<Encoded> process(std::vector<Encoded> seqs, bool) const override { return seqs; }
  std::optional<Trim> trims_offsets() const override {
    return trim_ ? std::optional<Trim>(Trim{prefix_space_}) : std::nullopt;
  }

 private:
  bool trim_, prefix_space_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  SequenceProcessor(const json& j, const Field& f) {
    const json& list = need(j, "processors", f);
    if (!list.is_array()) f.at("processors").fail("expected an array");
    for (size_t i = 0; i < list.size(); ++i) parts_.push_back(make_post_processor(list[i], f.at("processors").at(i)));
  }
  std::vector<Encoded> process(std::vector<Encoded> seqs, bool add_special_tokens) const override {
    for (const auto& p : parts_) seqs = p->process(std::move(seqs), add_special_tokens);
    return seqs;
  }
  // (the first part that trims: in the chains tokenizer.json files hold, ByteLevel before the
  // special tokens are added)
  std::optional<Trim> trims_offsets() const override {
    for (const auto& p : parts_)
      if (auto t = p->trims_offsets()) return t;
    return std::nullopt;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace
}  // namespace post_processors

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const Field& f) {
  using namespace post_processors;
  const std::string type = type_of(j, f);
  if (type == "TemplateProcessing") return std::make_unique<TemplateProcessing>(j, f);
  if (type == "BertProcessing") return std::make_unique<BertProcessing>(j, f);
  if (type == "RobertaProcessing") return std::make_unique<RobertaProcessing>(j, f);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j, f);
  if (type == "Sequence") return std::make_unique<SequenceProcessor>(j, f);
  f.at("type").fail("post-processor \"" + type +
                    "\" is not supported (TemplateProcessing, BertProcessing, RobertaProcessing, "
                    "ByteLevel, Sequence are)");
}

}  // namespace qkv::text::hf
