// qkv export --to ctranslate2: the shipped en-fr Transformer exported, then translated by
// CTranslate2 (its Python package, float32) exactly as `qkv translate --alpha 0` translates, greedy
// and beam 4; the files a CTranslate2 model directory needs; int8 loads and translates; the errors
// (a recurrent model, a missing file, a non-empty OUT_DIR, a bad --quantization). Skipped, with the
// reason, where `python3 -c "import ctranslate2, sentencepiece"` fails (pip install ctranslate2
// sentencepiece). The interpreter is QKV_PYTHON's when set, as for qkv export.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/io/file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

std::string python() {
  const char* p = std::getenv("QKV_PYTHON");
  return p && *p ? p : "python3";
}

std::string quoted(const std::string& s) {  // for the shell: ' → '\''
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `qkv ARGS`, run from the checkout (where models/ is).
testing::ShellResult qkv(const std::string& args) {
  return testing::run_shell("cd " + quoted(QKV_SOURCE_DIR) + " && " + QKV_CLI_PATH + " " + args);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(text.substr(at, nl - at));
  return out;
}

// Why the CTranslate2 side cannot run here, or "".
std::string missing_ctranslate2() {
  const auto r = testing::run_shell(python() + " -c 'import ctranslate2, sentencepiece'");
  return r.code == 0 ? "" : python() + " cannot import ctranslate2 and sentencepiece (pip install ctranslate2 "
                                       "sentencepiece): " + r.out;
}

// One sentence at a time, tokenized with the exported spm.model, decoded as qkv decodes with α = 0:
// CTranslate2 ranks by log p / |Y|^length_penalty (0 means "unset", hence 1e-9), qkv by
// log p / ((5+|Y|)/6)^α; min_decoding_length=0 lets EOS come first, as in qkv; the length cap is
// qkv's |source| + EOS + 50.
constexpr const char* kTranslateWithCt2 = R"(
import sys, ctranslate2, sentencepiece as spm
model, compute_type, beam, inp, out = sys.argv[1:6]
sp = spm.SentencePieceProcessor(model_file=model + "/spm.model")
tr = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, intra_threads=1)
with open(out, "w", encoding="utf-8") as f:
    for line in open(inp, encoding="utf-8").read().splitlines():
        t = sp.encode(line, out_type=str)
        r = tr.translate_batch([t], beam_size=int(beam), length_penalty=1e-9, min_decoding_length=0,
                               max_decoding_length=min(len(t) + 1 + 50, 256))[0]
        f.write(sp.decode(r.hypotheses[0]) + "\n")
)";

const std::vector<std::string> kSentences = {
    "The cat sleeps.",
    "I don't know what to do.",
    "Where is the train station?",
    "She has been reading the same book for three weeks.",
    "Tom and Mary got married in 2013.",
    "Could you please close the window? It's cold in here.",
    "We'll see.",
    "I think that it's going to rain tomorrow, so take an umbrella.",
    "My father is a doctor and my mother is a teacher.",
    "Hello!",
    "Why didn't you tell me the truth?",
    "The children are playing in the garden with their dog.",
    "It costs 25 dollars.",
    "\"Stop!\" he shouted.",
    "I have never seen anything so beautiful in my whole life.",
    "Do you speak French?",
    "The meeting was cancelled because of the snow.",
    "He's taller than his brother, but not as strong.",
    "What time is it?",
    "If I were you, I wouldn't trust him.",
    "I love 東京.",         // pieces outside the vocabulary: <unk>
    "  ﬁne   ½ cup ",        // NFKC and extra spaces, normalized by both tokenizers
};

class ExportCtranslate2 : public ::testing::Test {
 protected:
  ExportCtranslate2() : dir_("export-ct2") {}
  // CTranslate2's translations of kSentences by the model in `model_dir`.
  std::vector<std::string> ct2(const fs::path& model_dir, const std::string& compute_type, int beam) {
    const fs::path script = dir_.path / "ct2.py", out = dir_.path / "ct2.fr";
    io::write_file_atomic(script.string(), kTranslateWithCt2);
    const auto r = testing::run_shell(python() + " " + quoted(script) + " " + quoted(model_dir) + " " + compute_type +
                                      " " + std::to_string(beam) + " " + quoted(source()) + " " + quoted(out));
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? lines_of(io::read_file(out.string())) : std::vector<std::string>{};
  }
  // `qkv translate --alpha 0 --beam N`'s translations of kSentences.
  std::vector<std::string> qkv_translate(int beam) {
    const fs::path out = dir_.path / "qkv.fr";
    const auto r = qkv("translate -i " + quoted(source()) + " -o " + quoted(out) + " --alpha 0 --beam " +
                       std::to_string(beam));
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? lines_of(io::read_file(out.string())) : std::vector<std::string>{};
  }
  std::string source() {
    const fs::path src = dir_.path / "src.en";
    if (!fs::exists(src)) {
      std::string text;
      for (const auto& s : kSentences) text += s + "\n";
      io::write_file_atomic(src.string(), text);
    }
    return src.string();
  }
  testing::TempDir dir_;
};

TEST_F(ExportCtranslate2, TranslatesAsQkvDoesGreedyAndBeam4) {
  if (const std::string why = missing_ctranslate2(); !why.empty()) GTEST_SKIP() << why;
  const fs::path out = dir_.path / "en-fr-ct2";
  const auto e = qkv("export --to ctranslate2 models/en-fr.safetensors " + quoted(out));
  ASSERT_EQ(e.code, 0) << e.out;
  for (const char* f : {"model.bin", "config.json", "shared_vocabulary.json", "spm.model"})
    EXPECT_TRUE(fs::exists(out / f)) << f << " missing; the export said: " << e.out;
  for (int beam : {1, 4}) {
    const auto want = qkv_translate(beam), got = ct2(out, "float32", beam);
    ASSERT_EQ(want.size(), kSentences.size());
    ASSERT_EQ(got.size(), kSentences.size());
    for (size_t i = 0; i < kSentences.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << "beam " << beam << ": \"" << kSentences[i] << "\"";
  }
}

// int8 (CTranslate2's per-row int8 weights) writes a quarter of the bytes and still translates; its
// translations may differ from float32's, so they are checked loosely (most of them agree). Written
// with --force over a float32 export: the files an export writes are replaced, others kept.
TEST_F(ExportCtranslate2, Int8OverwritesWithForceAndTranslates) {
  if (const std::string why = missing_ctranslate2(); !why.empty()) GTEST_SKIP() << why;
  const fs::path out = dir_.path / "ct2";
  auto e = qkv("export --to ctranslate2 -m models/en-fr.safetensors " + quoted(out));
  ASSERT_EQ(e.code, 0) << e.out;
  const auto f32_bytes = fs::file_size(out / "model.bin");
  io::write_file_atomic((out / "notes.txt").string(), "mine\n");
  e = qkv("export --to ctranslate2 models/en-fr.safetensors " + quoted(out) + " --quantization int8");
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.out.find("not empty"), std::string::npos) << e.out;
  e = qkv("export --to ctranslate2 models/en-fr.safetensors " + quoted(out) + " --quantization int8 --force");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_LT(fs::file_size(out / "model.bin"), f32_bytes / 3);
  EXPECT_TRUE(fs::exists(out / "notes.txt"));
  const auto want = qkv_translate(4), got = ct2(out, "int8", 4);
  ASSERT_EQ(got.size(), kSentences.size());
  int same = 0;
  for (size_t i = 0; i < kSentences.size(); ++i) same += got[i] == want[i];
  EXPECT_GE(same, static_cast<int>(kSentences.size()) * 3 / 4);
}

TEST_F(ExportCtranslate2, ARecurrentModelIsRefusedByName) {
  if (testing::run_shell(python() + " -c pass").code != 0) GTEST_SKIP() << "no " << python() << " on PATH";
  const auto r = qkv("export --to ctranslate2 models/en-fr-gru.safetensors " + quoted(dir_.path / "gru"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("cannot export"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CTranslate2's TransformerSpec needs a Transformer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rnn-attention"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_.path / "gru" / "model.bin"));
}

TEST_F(ExportCtranslate2, BadArgumentsAreNamed) {
  const std::string missing = (dir_.path / "no-such-model.safetensors").string();
  auto r = qkv("export --to ctranslate2 " + quoted(missing) + " " + quoted(dir_.path / "out"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find(missing), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not found"), std::string::npos) << r.out;

  r = qkv("export --to onnx models/en-fr.safetensors " + quoted(dir_.path / "out"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("must be hf or ctranslate2, got onnx"), std::string::npos) << r.out;
  r = qkv("export --to ctranslate2 models/en-fr.safetensors " + quoted(dir_.path / "out") + " --quantization int4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("got int4"), std::string::npos) << r.out;

  // The interpreter comes from QKV_PYTHON: one that does not exist is named.
  r = testing::run_shell("cd " + quoted(QKV_SOURCE_DIR) + " && QKV_PYTHON=/nonexistent/python9 " + QKV_CLI_PATH +
                         " export --to ctranslate2 models/en-fr.safetensors " + quoted(dir_.path / "out3"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("cannot run '/nonexistent/python9'"), std::string::npos) << r.out;

  // A non-empty OUT_DIR is left alone unless --force (the script says so: it needs python3).
  if (testing::run_shell(python() + " -c pass").code != 0) GTEST_SKIP() << "no " << python() << " on PATH";
  const fs::path full = dir_.path / "full";
  fs::create_directories(full);
  io::write_file_atomic((full / "keep.txt").string(), "mine\n");
  r = qkv("export --to ctranslate2 models/en-fr.safetensors " + quoted(full));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("not empty"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(full / "model.bin"));
}

}  // namespace
}  // namespace qkv
