// Chat templates (qkv/text/chat_template.h): the template found in a tokenizer's files, and the
// variables transformers 5's apply_chat_template gives it.
#include "qkv/text/chat_template.h"

#include <algorithm>

#include "jinja_values.h"

namespace qkv::text {

namespace {

using ojson = nlohmann::ordered_json;

// A special token's text in tokenizer_config.json: a string, or an AddedToken {"content": …}.
std::optional<std::string> token_text(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// transformers' _normalize_chat_messages then _alias_reasoning_fields.
ojson normalize(const ojson& messages, const std::string& what) {
  QKV_CHECK(messages.is_array(), what, ": the messages must be a JSON array, got ", messages.type_name());
  ojson out = ojson::array();
  for (const auto& m : messages) {
    QKV_CHECK(m.is_object(), what, ": each message must be a JSON object, got ", m.type_name());
    ojson kept = ojson::object();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) kept[k] = v;
    const ojson* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (kept.contains(key) && !reasoning) reasoning = &kept[key];
    if (reasoning) {
      ojson aliased = ojson::object();
      aliased["thinking"] = *reasoning;
      for (const auto& [k, v] : kept.items()) aliased[k] = v;
      aliased["reasoning_content"] = *reasoning;
      kept = std::move(aliased);
    }
    out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, ojson special_tokens, std::string what)
    : source_(source),
      template_(std::make_shared<const jinja::Template>(source, std::move(what))),
      special_tokens_(std::move(special_tokens)) {}

std::optional<ChatTemplate> ChatTemplate::from_config(const nlohmann::json& config, const std::string& file,
                                                      const std::string& name) {
  const std::string want = name.empty() ? "default" : name;
  std::string source, what;
  if (!file.empty()) {
    source = file;
    what = "the chat template (chat_template.jinja)";
  } else if (config.is_object() && config.contains("chat_template")) {
    const auto& t = config["chat_template"];
    if (t.is_string())
      source = t.get<std::string>();
    else if (t.is_array()) {
      for (const auto& named : t) {
        QKV_CHECK(
            named.is_object() && named.contains("name") && named["name"].is_string() && named.contains("template") &&
                named["template"].is_string(),
            "tokenizer_config.json: \"chat_template\": a list must hold {\"name\": string, \"template\": string}");
        if (named["name"] == want) source = named["template"].get<std::string>();
      }
      QKV_CHECK(!source.empty() || name.empty(), "tokenizer_config.json: \"chat_template\" has no template named '",
                want, "'");
    } else if (!t.is_null())
      throw Error("tokenizer_config.json: \"chat_template\" must be a string or a list of named templates, got " +
                  std::string(t.type_name()));
    what = "the chat template (tokenizer_config.json)";
  }
  if (source.empty()) return std::nullopt;
  ojson special = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (auto text = token_text(config, key)) special[key] = *text;
  return ChatTemplate(source, std::move(special), what);
}

namespace {

// s without Python's leading and trailing whitespace (str.strip()).
std::string py_strip(const std::string& s) {
  const size_t end = jinja::detail::py_rstrip_end(s);
  const size_t begin = std::min(jinja::detail::py_lstrip_begin(s, 0), end);
  return s.substr(begin, end - begin);
}

const char* const kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";  // transformers' own

// continue_final_message's first half (transformers' render_jinja_template): the final message's
// `field` (every reasoning alias of the same value, for a reasoning field) gets the tag appended —
// the last text block's text, for a list — and its text before the tag is returned.
std::string mark_final_message(ojson& messages, const std::string& field, const std::string& source,
                               const std::string& what) {
  QKV_CHECK(!messages.empty(), what, ": continue_final_message is set but the conversation is empty");
  ojson& last = messages.back();
  QKV_CHECK(last.contains(field), what, ": continue_final_message is set but the final message has no \"", field,
            "\" to continue");
  std::vector<std::string> fields = {field};
  if (field == "reasoning_content" || field == "thinking" || field == "reasoning") {
    fields.clear();
    for (const char* f : {"reasoning_content", "thinking", "reasoning"})
      if (last.contains(f) && last[f] == last[field]) fields.push_back(f);
  }
  QKV_CHECK(std::any_of(fields.begin(), fields.end(),
                        [&](const std::string& f) { return source.find(f) != std::string::npos; }),
            what, ": continue_final_message is set to \"", field,
            "\" but this is not an accepted field in the chat template");
  ojson& value = last[field];
  if (value.is_array()) {
    for (auto it = value.rbegin(); it != value.rend(); ++it)
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        const std::string text = (*it)["text"].get<std::string>();
        (*it)["text"] = text + kContinueTag;
        return text;
      }
    throw Error(what +
                ": continue_final_message is set but we could not find any text to continue in the final message");
  }
  QKV_CHECK(value.is_string(), what, ": continue_final_message: the final message's \"", field, "\" is a ",
            value.type_name(), ", not text to continue");
  const std::string text = value.get<std::string>();
  for (const std::string& f : fields) last[f] = last[f].get<std::string>() + kContinueTag;
  return text;
}

}  // namespace

std::string ChatTemplate::apply(const ChatInputs& in, const jinja::Limits& limits) const {
  ojson context = ojson::object();
  context["messages"] = normalize(in.messages, template_->what());
  std::string final_message;
  const bool continuing = !in.continue_final_message.empty();
  if (continuing) {
    QKV_CHECK(!in.add_generation_prompt, template_->what(),
              ": continue_final_message and add_generation_prompt are not "
              "compatible (continue the final message, or prompt a new assistant message)");
    final_message = mark_final_message(context["messages"], in.continue_final_message, source_, template_->what());
  }
  context["tools"] = in.tools;
  context["documents"] = in.documents;
  context["add_generation_prompt"] = in.add_generation_prompt;
  for (const auto& [k, v] : special_tokens_.items()) context[k] = v;
  QKV_CHECK(in.extra.is_object(), template_->what(), ": the extra variables must be a JSON object");
  for (const auto& [k, v] : in.extra.items()) context[k] = v;
  std::string out = template_->render(context, limits);
  if (!continuing) return out;
  // cut at the tag's last occurrence; where the template trimmed the space after it, also before the
  // whitespace it left
  const std::string tag = kContinueTag, bare = py_strip(tag);
  QKV_CHECK(out.find(py_strip(final_message)) != std::string::npos && out.find(bare) != std::string::npos,
            template_->what(),
            ": continue_final_message is set but the final message does not appear in the chat "
            "after applying the chat template (the template drops part of it)");
  const size_t at = out.rfind(bare);
  if (out.compare(at, tag.size(), tag) == 0) return out.substr(0, at);
  out.resize(at);
  out.resize(jinja::detail::py_rstrip_end(out));
  return out;
}

}  // namespace qkv::text
