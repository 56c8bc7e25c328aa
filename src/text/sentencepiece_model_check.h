// What libsentencepiece reads of a model without checking, checked before it sees the model: a
// crafted .model file (a Marian folder's source.spm, a model file's model_base64) must end in a
// qkv::Error, not in the library reading past its buffers (tests/text/sentencepiece_test.cpp,
// fuzz/sentencepiece_fuzz.cpp). Private to text/.
#pragma once

#include <string>
#include <string_view>

namespace qkv::text::spm {

// `model`: a serialized ModelProto. Its normalizer_spec's and denormalizer_spec's
// precompiled_charsmap — the character map that nmt_nfkc and the other normalization rules compile
// to, which the library walks for every character of every text — must be one the library can walk
// without leaving it (below), and its pieces ones the library's tries can hold (not empty, no '\0',
// under 8,000 bytes); else qkv::Error(what + ": …"). Bytes protobuf cannot parse end there too.
void check_model(std::string_view model, const std::string& what);

}  // namespace qkv::text::spm
