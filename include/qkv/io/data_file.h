// A data set's file (a training text, a parallel corpus) read whole, from a regular file only and
// no more than its size: data.path = /dev/zero read on to 2 GB before failing, and a FIFO or a
// terminal would wait forever (issue 43). The file must also fit in half the machine's memory,
// beside what training will hold.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::io {

// The bytes of `path`. `what` names the input in errors ("lm task: data.path"):
//   "<what> '/dev/zero' is not a regular file", "<what> 'big.txt' holds 40.0 GiB, more than …".
std::string read_data_file(const std::string& path, const std::string& what);

// A path a config gives: as it is when absolute (or base_dir is ""), else under base_dir (the config
// file's folder, where its relative paths start).
std::string config_path(const std::string& path, const std::string& base_dir);

// The lines of `text` (a data file's, read whole), each with its number from 1 for messages, without
// "\r\n" / "\n"; blank lines (spaces and tabs only) left out unless `keep_blank` (CoNLL's sentence
// breaks). The views point into `text`.
std::vector<std::pair<size_t, std::string_view>> numbered_lines(std::string_view text, bool keep_blank = false);

}  // namespace qkv::io
