// GPT-2's reversible map between bytes and printable characters, the form vocab.json and merges.txt write tokens in:
// the 188 printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 for U+0100 and up.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace ember {

// byte_to_unicode()[b]: the UTF-8 of byte b's printable character.
const std::array<std::string, 256>& byte_to_unicode();

// The bytes a printable-form token stands for ("Ġthe" -> " the"); nothing if a character is not in the map.
std::optional<std::string> unicode_to_bytes(std::string_view printable);

// The printable form of raw bytes (" the" -> "Ġthe").
std::string bytes_to_unicode(std::string_view bytes);

// The 256 bytes in the order GPT-2's vocabulary gives them ids 0..255: the printable ones first, in byte order,
// then the others in byte order.
const std::array<unsigned char, 256>& gpt2_byte_order();

}  // namespace ember
