// The codec kernels' arguments (kernels.h, KvCodecArgs) for a block shape and spill codec: what
// the tier copies (kv_transfer.cpp) and the tier benchmark pass to launch_encode_kv_blocks and
// launch_decode_kv_blocks.
#pragma once

#include "backend/cuda/kernels.h"
#include "backend/kv_codec.h"

namespace akv::cuda {

// From encoded_layout(codec, shape); the live dtype is shape.dtype.
KvCodecArgs kv_codec_args(SpillCodec codec, const BlockShape& shape);

}  // namespace akv::cuda
