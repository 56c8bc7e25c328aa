// Chat templates: the Jinja engine against transformers' renderer (tests/golden/chat_templates.json,
// from tests/golden/make_chat_template_golden.py: family templates in the formats of Llama 2/3/3.1,
// ChatML, Qwen3, Gemma, Mistral, Phi-3, DeepSeek and 389 single-feature cases), the tokenized prompt
// against apply_chat_template(tokenize=True) (tests/golden/hf-chat), and the limits a crafted
// template meets.
#include "qkv/text/chat_template.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/jinja.h"
#include "qkv/text/lm_tokenizer.h"

namespace qkv::text {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kGolden = QKV_GOLDEN_DIR;

std::string render(const std::string& source, const ojson& context = ojson::object(),
                   const jinja::Limits& limits = {}) {
  return jinja::Template(source, "test").render(context, limits);
}

// What the engine does not do: each of these golden cases must fail with a qkv::Error naming what is
// missing (never a wrong text), except those in kDiffers.
const std::set<std::string> kUnsupported = {
    "lit-unicode-escapes",  // \N{…}
    "arith-big-int",        // ints past 64 bits
    "f-tojson-scalars",     // (one of its values is 2 ** 70)
};
const std::set<std::string> kDiffers = {};

TEST(Jinja, RendersAsTransformers) {
  const ojson golden = ojson::parse(io::read_file(kGolden + "/chat_templates.json"));
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    std::string out, error;
    try {
      out = render(c["template"], c["context"]);
    } catch (const Error& e) {
      error = e.what();
    }
    if (kUnsupported.count(name)) {
      EXPECT_FALSE(error.empty()) << "now renders: " << out;
      continue;
    }
    if (kDiffers.count(name)) continue;
    if (c.contains("error")) {
      EXPECT_FALSE(error.empty()) << "transformers: " << c["error"] << "\nqkv: " << out;
    } else {
      EXPECT_EQ(error, "");
      EXPECT_EQ(out, c["output"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_GE(checked, 420);
}

TEST(Jinja, PythonsValues) {
  EXPECT_EQ(render("{{ 7 // -2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 1e16 }} {{ 1e-05 }} {{ 0.1 + 0.2 }} {{ -0.0 }}"),
            "-4 2 3.5 1e+16 1e-05 0.30000000000000004 -0.0");
  EXPECT_EQ(render("{{ ['a', \"it's\", none, true, {'k': 1.0}] }}"), "['a', \"it's\", None, True, {'k': 1.0}]");
  EXPECT_EQ(render("{{ 'héllo👋'[1] }}{{ 'héllo👋'|length }}{{ 'héllo👋'[::-1] }}"), "é6👋olléh");
  EXPECT_EQ(render("{{ {'b': [1, 'é', none]}|tojson }}|{{ {'a': {}}|tojson(indent=2) }}"),
            "{\"b\": [1, \"é\", null]}|{\n  \"a\": {}\n}");
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), Error);  // past 64 bits: refused, not wrapped
  // an attribute of digits past 64 bits is a key, not an index (std::stoll threw here once)
  EXPECT_EQ(render("{{ [{'a': 1}]|map(attribute='99999999999999999999')|list }}"), "[Undefined]");
}

TEST(Jinja, WhitespaceAsTransformersEnvironment) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before one
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
}

TEST(Jinja, RaiseExceptionIsTheTemplatesRefusal) {
  try {
    render("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
           ojson{{"messages", ojson::array({ojson{{"role", "system"}, {"content", "x"}}})}});
    FAIL() << "no exception";
  } catch (const jinja::RaisedError& e) {
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos) << e.what();
  }
}

// A crafted template meets a limit, named, instead of hanging or filling memory.
TEST(Jinja, CraftedTemplatesMeetLimits) {
  auto fails_with = [](const std::string& source, const std::string& words, const jinja::Limits& limits = {}) {
    try {
      render(source, ojson::object(), limits);
      ADD_FAILURE() << source << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << source << ": " << e.what();
    }
  };
  fails_with("{% for i in range(1000000) %}{% endfor %}", "MAX_RANGE");
  fails_with("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps");
  fails_with("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output", {1 << 20, 20'000'000});
  fails_with("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deep");
  fails_with("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "nested");
  fails_with("{{ 'x' * 100000000 }}", "64 MiB");
  fails_with("{% set ns = namespace(s='x') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
             "steps");
  fails_with("{{ [].append(1) }}", "unsafe");
  fails_with("{% set ns = namespace() %}{% set ns._x = 1 %}", "unsafe");
  fails_with("{% for x in y %}", "endfor");
  fails_with("{{ x | nosuchfilter }}", "nosuchfilter");
  EXPECT_THROW(jinja::Template(std::string("{{ '\xff' }}")), Error);  // not UTF-8
}

// render + encode without special tokens = transformers' apply_chat_template(tokenize=True), the
// template read from chat_template.jinja (as new Hub folders keep it).
TEST(ChatTemplate, TokenizedAsTransformers) {
  const std::string dir = kGolden + "/hf-chat";
  const nlohmann::json config = nlohmann::json::parse(io::read_file(dir + "/tokenizer_config.json"));
  const auto tmpl = ChatTemplate::from_config(config, io::read_file(dir + "/chat_template.jinja"));
  ASSERT_TRUE(tmpl);
  const HfTokenizer tok = HfTokenizer::from_folder(dir);
  const ojson ref = ojson::parse(io::read_file(dir + "/reference.json"));
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ChatInputs in;
    in.messages = c["messages"];
    in.tools = c["tools"];
    in.add_generation_prompt = c["add_generation_prompt"];
    if (c.contains("continue_final_message"))  // true, or the field's name
      in.continue_final_message =
          c["continue_final_message"].is_string() ? c["continue_final_message"].get<std::string>() : "content";
    const std::string text = tmpl->apply(in);
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tok.encode(text, /*add_special_tokens=*/false), c["ids"].get<std::vector<int32_t>>());
  }
}

// continue_final_message as transformers' render_jinja_template does it: the cut at the tag, before the
// whitespace a trimming template leaves; the last text block of a list; reasoning's aliases; and the
// errors it raises (no conversation, no such field, a field the template never reads, a template that
// drops the text, with add_generation_prompt).
TEST(ChatTemplate, ContinueFinalMessageAsTransformers) {
  auto apply = [](const std::string& source, ojson messages, const std::string& field, bool gen = false) {
    ChatTemplate t(source, ojson::object(), "the chat template (test)");
    ChatInputs in;
    in.messages = std::move(messages), in.add_generation_prompt = gen, in.continue_final_message = field;
    return t.apply(in);
  };
  const ojson partial =
      ojson::array({ojson{{"role", "user"}, {"content", "Hi"}}, ojson{{"role", "assistant"}, {"content", "Hello "}}});
  const std::string plain = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}";
  EXPECT_EQ(apply(plain, partial, "content"), "<user>Hi</user><assistant>Hello ");
  // a template that trims the content: the tag's space trimmed, so the cut also drops the trailing space
  const std::string trims = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}";
  EXPECT_EQ(apply(trims, partial, "content"), "<user>Hi</user><assistant>Hello");
  // a list of blocks: the last text block continues
  const ojson blocks = ojson::array(
      {ojson{{"role", "assistant"},
             {"content", ojson::array({ojson{{"type", "text"}, {"text", "One."}}, ojson{{"type", "image"}},
                                       ojson{{"type", "text"}, {"text", "Two"}}, ojson{{"type", "image"}}})}}});
  EXPECT_EQ(apply("{% for b in messages[0].content %}{% if b.text %}[{{ b.text }}]{% endif %}{% endfor %}", blocks,
                  "content"),
            "[One.][Two");
  // reasoning: every alias of the same value carries the tag; the template reads one of them
  const ojson thinking = ojson::array({ojson{{"role", "assistant"}, {"reasoning_content", "Let me"}, {"content", ""}}});
  EXPECT_EQ(apply("<think>{{ messages[0].thinking }}</think>{{ messages[0].content }}", thinking, "reasoning_content"),
            "<think>Let me");
  auto fails = [&](const std::string& source, const ojson& messages, const std::string& field, bool gen,
                   const std::string& want) {
    const std::string e = testing::error_of([&] { apply(source, messages, field, gen); });
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  fails(plain, ojson::array(), "content", false, "the conversation is empty");
  fails(plain, partial, "name", false, "has no \"name\" to continue");
  fails(plain, ojson::array({ojson{{"role", "assistant"}, {"body", "x"}}}), "body", false,
        "not an accepted field in the chat template");
  fails("{% for m in messages %}{{ m.content[:2] }}{% endfor %}", partial, "content", false, "does not appear");
  fails(plain, partial, "content", true, "not compatible");
  fails(plain, ojson::array({ojson{{"role", "assistant"}, {"content", 5}}}), "content", false, "not text to continue");
}

TEST(ChatTemplate, FoundWhereTransformersLooks) {
  nlohmann::json config = {{"bos_token", {{"content", "<s>"}, {"special", true}}}, {"eos_token", "</s>"}};
  EXPECT_FALSE(ChatTemplate::from_config(config));
  config["chat_template"] = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}";
  ChatInputs in;
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(ChatTemplate::from_config(config)->apply(in), "<s>hi</s>");
  EXPECT_EQ(ChatTemplate::from_config(config, "[{{ messages[0].content }}]")->apply(in), "[hi]");  // the .jinja wins
  config["chat_template"] = nlohmann::json::array(
      {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D{{ add_generation_prompt }}"}}});
  EXPECT_EQ(ChatTemplate::from_config(config)->apply(in), "DTrue");
  EXPECT_EQ(ChatTemplate::from_config(config, "", "tool_use")->apply(in), "T");
  EXPECT_THROW(ChatTemplate::from_config(config, "", "rag"), Error);
  // transformers drops null-valued keys and copies reasoning to "thinking" and "reasoning_content"
  in.messages = ojson::array({ojson{{"role", "assistant"}, {"content", nullptr}, {"reasoning", "r"}}});
  EXPECT_EQ(ChatTemplate("{{ messages[0]|tojson }}", ojson::object(), "t").apply(in),
            "{\"thinking\": \"r\", \"role\": \"assistant\", \"reasoning\": \"r\", \"reasoning_content\": \"r\"}");
  config["chat_template"] = "{% if %}";
  EXPECT_THROW(ChatTemplate::from_config(config), Error);
}

// A converted model's tokenizer keeps the template; one that does not compile leaves its error.
TEST(ChatTemplate, InTheModelFilesTokenizer) {
  const std::string dir = kGolden + "/hf-chat";
  nlohmann::json j = {{"type", "hf"},
                      {"tokenizer_json", io::read_file(dir + "/tokenizer.json")},
                      {"tokenizer_config", nlohmann::json::parse(io::read_file(dir + "/tokenizer_config.json"))},
                      {"chat_template", io::read_file(dir + "/chat_template.jinja")}};
  const LMTokenizer t = LMTokenizer::from_json(j);
  ASSERT_NE(t.chat_template(), nullptr);
  ChatInputs in;
  in.messages = ojson::array({ojson{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(t.encode_prompt(t.chat_template()->apply(in))[0], 512);  // <|im_start|>, no BOS before it
  j["chat_template"] = "{% for %}";
  const LMTokenizer bad = LMTokenizer::from_json(j);
  EXPECT_EQ(bad.chat_template(), nullptr);
  EXPECT_NE(bad.chat_template_error().find("chat_template.jinja"), std::string::npos) << bad.chat_template_error();
}

}  // namespace
}  // namespace qkv::text
