// Issue 43, items 1, 6 and 7: sizes a training config, a model file or a decoding option asks for
// are checked before anything is allocated or run — each ends in an error naming the key, never a
// heap overflow, a hang or growth to the memory cap.
#include <filesystem>

#include "qkv/decode/search.h"
#include "qkv/decode/translator.h"
#include "qkv/io/data_file.h"
#include "qkv/io/file.h"
#include "qkv/ops/tensor.h"
#include "qkv/nn/captioner.h"
#include "qkv/nn/rnn_seq2seq.h"
#include "qkv/nn/transformer.h"
#include "qkv/train/lm_task.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// `qkv train configs/shakespeare-char.json --set <set>` in a fresh folder: exit status and output.
testing::ShellResult train_with(const std::string& set, const std::string& env = "") {
  static int n = 0;
  const fs::path out = fs::temp_directory_path() / ("qkv-hostile-sizes-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(n++));
  testing::ShellResult r = testing::run_shell(env + "timeout 120 " + std::string(QKV_CLI_PATH) + " train " +
                                              QKV_SOURCE_DIR + "/configs/shakespeare-char.json --quiet -o " +
                                              out.string() + " --set train.max_iters=1 --set train.eval_iters=1 --set " +
                                              set);
  std::error_code ec;
  fs::remove_all(out, ec);
  return r;
}

TEST(HostileSizes, LmBatchSizeTimesBlockSizeOverflows) {
  // item 1: 2^62 × 64 wrapped to a 0-byte buffer that the windows were copied into
  const std::vector<int32_t> data(1000, 1);
  const std::string e = testing::error_of([&] { train::lm_batch(data, int64_t{1} << 62, 64, 1, 0); });
  EXPECT_TRUE(has(e, "lm: batch_size × block_size: 4611686018427387904 × 64 is more than 2^63")) << e;
  testing::ShellResult r = train_with("train.batch_size=4611686018427387904");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "qkv: error: lm task: train.batch_size × model.block_size")) << r.out;
  // a batch that does not overflow but cannot fit: refused, naming the keys and the memory
  r = train_with("train.batch_size=1073741824");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "lm task: train.batch_size 1073741824 × model.block_size 64 × vocab_size 65")) << r.out;
  EXPECT_TRUE(has(r.out, "of memory")) << r.out;
}

TEST(HostileSizes, ModelTooLargeForTheMachineNamesItsKeys) {
  // item 7: 10⁵ layers grew to the memory cap; n_embd / block_size 2^40 ended in "Storage: cannot
  // allocate N bytes" naming no key. Memory is capped (ulimit -v) so a regression fails, not swaps.
  for (const std::string set : {"model.n_layer=100000", "model.n_embd=1099511627776", "model.block_size=1099511627776"}) {
    testing::ShellResult r = train_with(set, "ulimit -v 16000000; ");
    const std::string key = set.substr(6, set.find('=') - 6), value = set.substr(set.find('=') + 1);
    EXPECT_EQ(r.code, 1) << set << ": " << r.out;
    EXPECT_TRUE(has(r.out, "qkv: error: lm task: model (")) << r.out;
    EXPECT_TRUE(has(r.out, key + " " + value)) << r.out;
  }
  testing::ShellResult r = train_with("model.n_layer=100000");
  EXPECT_TRUE(has(r.out, "of memory for 4 copies")) << r.out;
}

TEST(HostileSizes, ManyTinyTensorsChargeTheirBookkeeping) {
  // 10⁵ layers of width 8 passed a 16 MiB budget holding 1 GB of Storage/TensorImpl bookkeeping:
  // each tensor is charged 1 KiB beyond its bytes
  {
    AllocationBudget budget(size_t{100} << 10, "tiny tensors");
    std::vector<Tensor> keep;
    const std::string e = testing::error_of([&] {
      for (int i = 0; i < 1000; ++i) keep.push_back(Tensor::empty({1}));
    });
    EXPECT_NE(e.find("tiny tensors"), std::string::npos) << e;
    EXPECT_LT(keep.size(), 101u);
  }
}

TEST(HostileSizes, GradientAccumulationBounded) {
  // item 6: 10⁹ micro-batches a step ran for days
  testing::ShellResult r = train_with("train.gradient_accumulation_steps=1000000000");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "gradient_accumulation_steps")) << r.out;
  EXPECT_TRUE(has(r.out, "1024")) << r.out;
}

TEST(HostileSizes, DataPathMustBeARegularFile) {
  // item 6: /dev/zero was read on to 2 GB
  EXPECT_TRUE(has(testing::error_of([] { io::read_data_file("/dev/zero", "lm task: data.path"); }),
                  "lm task: data.path '/dev/zero' is a character device, not a regular file"));
  testing::ShellResult r = train_with("data.path=/dev/zero", "ulimit -v 4000000; ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "qkv: error: lm task: data.path '/dev/zero' is a character device, not a regular file")) << r.out;
  testing::TempDir dir("hostile-sizes");
  io::write_file_atomic((dir.path / "t.txt").string(), "hello");
  EXPECT_EQ(io::read_data_file((dir.path / "t.txt").string(), "x"), "hello");
}

TEST(HostileSizes, EosThatIsPaddingAndEndlessCaptionsRefused) {
  // item 6: a captioner with max_len 10⁹ and eos_id == pad_id decoded for days
  nlohmann::json c = {{"vocab_size", 20}, {"pad_id", 0}, {"bos_id", 2}, {"eos_id", 0}};
  EXPECT_TRUE(has(testing::error_of([&] { nn::CaptionerConfig::from_json(c); }),
                  "captioner config: eos_id 0 is also the pad_id"));
  EXPECT_TRUE(has(testing::error_of([&] { nn::RNNSeq2SeqConfig::from_json(c); }), "eos_id 0 is also the pad_id"));
  c["eos_id"] = 3;
  c["max_len"] = 1000000000;
  EXPECT_TRUE(has(testing::error_of([&] { nn::CaptionerConfig::from_json(c); }), "max_len"));
  EXPECT_TRUE(has(testing::error_of([&] { nn::RNNSeq2SeqConfig::from_json(c); }), "max_len"));
  EXPECT_TRUE(has(testing::error_of([] {
                    nn::Seq2SeqConfig::from_json({{"preset", "tiny"}, {"vocab_size", 20}, {"pad_id", 3}, {"eos_id", 3}});
                  }),
                  "Transformer config: eos_id 3 is also the pad_id"));
}

TEST(HostileSizes, BeamSizeCappedInTheLibrary) {
  // item 6: Python's translate_batch(beam_size=10**6) grew to 2.1 GB; the CLI's cap of 64 now holds
  // for every front end
  decode::TranslateOptions o;
  o.beam_size = 1000000;
  EXPECT_TRUE(has(testing::error_of([&] { decode::translate_ids_nbest({}, {{1, 2}}, o); }),
                  "translate: beam_size must be between 1 and 64, got 1000000"));
  EXPECT_EQ(decode::kMaxBeamSize, 64);
}

}  // namespace
}  // namespace qkv
