// The op table itself (tests/ops/op_table.h): names unique, every entry callable on its samples,
// every differentiable input named in some sample; prints how many cases each check runs.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "ops/op_table.h"

namespace qkv::optable {
namespace {

TEST(OpTable, EveryEntryIsWellFormed) {
  std::set<std::string> names;
  int samples = 0, gradchecks = 0, cuda = 0;
  for (const OpInfo& op : op_table()) {
    SCOPED_TRACE("op " + op.name);
    EXPECT_TRUE(names.insert(op.name).second) << "two entries named " << op.name;
    const std::vector<Sample> s = op.samples();
    EXPECT_FALSE(s.empty()) << "no sample";
    std::set<std::string> inputs;
    for (const Sample& x : s) {
      for (const auto& [n, t] : x.inputs) inputs.insert(n);
      ++samples;
      if (x.gradcheck && !op.differentiable.empty()) ++gradchecks;
      if (x.cuda && op.cuda) ++cuda;
      if (!x.gradcheck) continue;  // (the GPU-only ones are large)
      EXPECT_NO_THROW(op.run(x.inputs, x.params, Device::cpu()).at("out")) << "sample " << x.name;
    }
    for (const std::string& d : op.differentiable)
      EXPECT_TRUE(inputs.count(d)) << "differentiable input " << d << " is in no sample";
  }
  std::cout << "op table: " << op_table().size() << " ops, " << samples << " samples, " << gradchecks
            << " gradchecked, " << cuda << " compared on a GPU\n";
}

}  // namespace
}  // namespace qkv::optable
