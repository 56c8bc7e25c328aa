// A data set's file (a training text, a parallel corpus) read whole, from a regular file only and
// no more than its size: data.path = /dev/zero read on to 2 GB before failing, and a FIFO or a
// terminal would wait forever (issue 43). The file must also fit in half the machine's memory,
// beside what training will hold.
#pragma once

#include <string>

namespace qkv::io {

// The bytes of `path`. `what` names the input in errors ("lm task: data.path"):
//   "<what> '/dev/zero' is not a regular file", "<what> 'big.txt' holds 40.0 GiB, more than …".
std::string read_data_file(const std::string& path, const std::string& what);

}  // namespace qkv::io
