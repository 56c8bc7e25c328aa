// A chat model's prompt format: the Jinja template a Hugging Face tokenizer carries
// (tokenizer_config.json's "chat_template", or chat_template.jinja beside it), rendered as
// transformers' apply_chat_template renders it (qkv/text/jinja.h):
//
//   auto t = qkv::text::ChatTemplate::from_config(tokenizer_config, chat_template_jinja);
//   std::string prompt = t->apply({{{"role", "user"}, {"content", "Hi"}}});   // then encode it
//                                                                              // without special tokens
// The template sees what transformers 5 gives it: `messages` (each message without its keys whose
// value is null; a message's reasoning under "reasoning_content", "thinking" or "reasoning" copied to
// "thinking" first and "reasoning_content" last), `tools` and `documents` (null when not given),
// `add_generation_prompt`, the special tokens' texts (bos_token, eos_token, unk_token, sep_token,
// pad_token, cls_token, mask_token: those the config sets), then the caller's extra variables
// (enable_thinking, …), which win.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/text/jinja.h"

namespace qkv::text {

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role", "content", …}, …]
  nlohmann::ordered_json tools;                                       // null, or [{"type": "function", …}, …]
  nlohmann::ordered_json documents;                                   // null, or [{"title", "text"}, …]
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables
  // transformers' continue_final_message: "" (off), or the final message's field whose text the
  // prompt ends with, left open for the model to go on ("content" for transformers' True; the last
  // text block of a list). Not with add_generation_prompt.
  std::string continue_final_message;
};

class ChatTemplate {
 public:
  // The template of a tokenizer: `chat_template_file`'s text where not empty (chat_template.jinja),
  // else the config's "chat_template" — a string, or a list of {"name", "template"} of which the one
  // named `name` ("default" when empty); nullopt where there is none. A template that does not
  // compile is a qkv::Error naming it.
  static std::optional<ChatTemplate> from_config(const nlohmann::json& tokenizer_config,
                                                 const std::string& chat_template_file = "",
                                                 const std::string& name = "");
  ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens, std::string what);

  // The prompt for `in`; a template's raise_exception is a jinja::RaisedError, any other failure a
  // qkv::Error, each naming the template. With continue_final_message, the render is cut where the
  // final message's text ends (transformers marks it with a tag appended to the text, renders, and
  // cuts at the tag's last occurrence — before the whitespace the template put there, if it trimmed
  // the tag's own trailing space): a template that drops the text is an error saying so.
  std::string apply(const ChatInputs& in, const jinja::Limits& limits = {}) const;
  const std::string& source() const { return source_; }
  const jinja::Template& jinja() const { return *template_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  nlohmann::ordered_json special_tokens_;  // {"bos_token": "<s>", …}
};

}  // namespace qkv::text
