// What an incremental decoder says about the bytes it was shown.
#pragma once

#include <cstdint>

namespace lockbench {

enum class DecodeStatus : std::uint8_t {
  kReply,      // one whole reply decoded; `consumed` bytes belong to it
  kNeedMore,   // the input ends inside a reply: read more, call again
  kMalformed,  // not this protocol: the stream cannot be resynchronised
};

}  // namespace lockbench
