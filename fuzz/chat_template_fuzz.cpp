// Chat templates on arbitrary bytes: the input is a template's source (a crafted
// chat_template.jinja), compiled, then rendered on two conversations (one with tools, reasoning and
// unicode). Each ends in a text or a qkv::Error — never a crash, and never a hang or an allocation
// past the render's limits (text/jinja.h's Limits: steps, output bytes; range, nesting and macro depth).
#include <cstdint>
#include <string>
#include <string_view>

#include "qkv/core/error.h"
#include "qkv/text/chat_template.h"

namespace {

using ojson = nlohmann::ordered_json;

const qkv::text::ChatInputs& conversation(int k) {
  static const qkv::text::ChatInputs inputs[2] = {
      [] {
        qkv::text::ChatInputs in;
        in.messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
        return in;
      }(),
      [] {
        qkv::text::ChatInputs in;
        in.messages = ojson::parse(R"([
          {"role": "system", "content": "Be brief. ✓"},
          {"role": "user", "content": "Weather in Paris? 天気 👋🏽 \"quoted\" \\ <|im_end|>"},
          {"role": "assistant", "content": null, "reasoning_content": "call the tool",
           "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "content": "{\"temp\": 21.5}", "tool_call_id": "0"},
          {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]}])");
        in.tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "d",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
        in.extra = ojson::parse(R"({"enable_thinking": false, "date_string": "26 Jul 2024"})");
        return in;
      }()};
  return inputs[k];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  qkv::text::jinja::Limits limits;
  limits.max_steps = 200'000;  // (the sanitizers run ~10× slower: a render stays well under the 30 s timeout)
  limits.max_output_bytes = 1 << 20;
  try {
    const qkv::text::ChatTemplate t(source, ojson{{"bos_token", "<s>"}, {"eos_token", "</s>"}}, "fuzz/chat_template.jinja");
    for (int k = 0; k < 2; ++k) {
      try {
        t.apply(conversation(k), limits);
      } catch (const qkv::Error&) {
      }
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
