// Base64 (RFC 4648, with '=' padding): binary blobs inside JSON metadata, such as the SentencePiece
// model a translation model file carries in its safetensors header.
#pragma once

#include <string>
#include <string_view>

namespace qkv::io {

std::string base64_encode(std::string_view bytes);
// Invalid characters or length → qkv::Error (`what` names the blob in the message).
std::string base64_decode(std::string_view text, std::string_view what = "base64 data");

}  // namespace qkv::io
