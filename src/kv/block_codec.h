// The spill codecs moved to backend/kv_codec.h (backends decode them on the device); this name
// stays for the kv/ code that encodes and decodes blocks on the host.
#pragma once

#include "backend/kv_codec.h"
