// What `serve` runs with when its flags leave a choice open (app/serve_defaults.h): the KV dtype,
// the step sizes and the device KV pool.
#include "app/serve_defaults.h"

#include <gtest/gtest.h>

#include "backend/cpu/reference_backend.h"
#include "base/error.h"

namespace akv {
namespace {

// A backend that reports device memory and prefers BF16 KV, as the CUDA backend does.
class FakeDevice final : public ReferenceBackend {
 public:
  explicit FakeDevice(DeviceMemory m) : memory_(m) {}
  DType preferred_kv_dtype() const override { return DType::BF16; }
  std::optional<DeviceMemory> device_memory() const override { return memory_; }

 private:
  DeviceMemory memory_;
};

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

TEST(ServeDefaults, KvDtypeAutoIsTheBackendsPreferredOne) {
  const ReferenceBackend cpu;
  const FakeDevice gpu({.free_bytes = 60 * kGiB, .total_bytes = 80 * kGiB});
  EXPECT_EQ(resolve_kv_dtype("auto", cpu), DType::F32);
  EXPECT_EQ(resolve_kv_dtype("auto", gpu), DType::BF16);
  EXPECT_EQ(resolve_kv_dtype("f32", gpu), DType::F32);
  EXPECT_EQ(resolve_kv_dtype("f16", cpu), DType::F16);
  EXPECT_EQ(resolve_kv_dtype("bf16", cpu), DType::BF16);
  try {
    resolve_kv_dtype("int8", cpu);
    FAIL() << "int8 is no KV dtype";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-dtype"), std::string::npos);
  }
}

TEST(ServeDefaults, TierCodecAutoIsInt8OnADeviceAndNativeOnTheCpu) {
  const ReferenceBackend cpu;
  const FakeDevice gpu({.free_bytes = 60 * kGiB, .total_bytes = 80 * kGiB});
  for (const char* flag : {"--kv-host-codec", "--kv-spill-codec"}) {
    EXPECT_EQ(resolve_tier_codec(flag, "auto", cpu), SpillCodec::Native) << flag;
    EXPECT_EQ(resolve_tier_codec(flag, "auto", gpu), SpillCodec::Int8) << flag;
    EXPECT_EQ(resolve_tier_codec(flag, "native", gpu), SpillCodec::Native) << flag;
    EXPECT_EQ(resolve_tier_codec(flag, "int4", cpu), SpillCodec::Int4) << flag;
    try {
      resolve_tier_codec(flag, "fp8", gpu);
      FAIL() << "fp8 is no tier codec";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos);
    }
  }
}

TEST(ServeDefaults, TierCodecFlagsNameTheFlagWhenBad) {
  EXPECT_EQ(resolve_tier_codec("--kv-host-codec", "native"), SpillCodec::Native);
  EXPECT_EQ(resolve_tier_codec("--kv-spill-codec", "int4"), SpillCodec::Int4);
  try {
    resolve_tier_codec("--kv-spill-codec", "fp8");
    FAIL() << "fp8 is no tier codec";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-spill-codec"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'fp8'"), std::string::npos);
  }
}

TEST(ServeDefaults, StateCodecFlagIsExactOrBf16) {
  EXPECT_EQ(resolve_state_codec("exact"), StateCodec::Exact);
  EXPECT_EQ(resolve_state_codec("bf16"), StateCodec::Bf16);
  try {
    resolve_state_codec("native");
    FAIL() << "native is a KV tier codec, not a state codec";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-state-codec"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'native'"), std::string::npos);
  }
}

TEST(ServeDefaults, StepSizesDependOnTheBackendUnlessGiven) {
  const ReferenceBackend cpu;
  const FakeDevice gpu({.free_bytes = 60 * kGiB, .total_bytes = 80 * kGiB});
  EXPECT_EQ(resolve_step_sizes(0, 0, cpu).max_batch_tokens, 512);
  EXPECT_EQ(resolve_step_sizes(0, 0, cpu).prefill_chunk, 256);
  EXPECT_EQ(resolve_step_sizes(0, 0, gpu).max_batch_tokens, 8192);
  EXPECT_EQ(resolve_step_sizes(0, 0, gpu).prefill_chunk, 8192);
  const StepSizes given = resolve_step_sizes(1024, 4096, gpu);
  EXPECT_EQ(given.max_batch_tokens, 1024);
  EXPECT_EQ(given.prefill_chunk, 1024);  // a chunk never exceeds the step
  EXPECT_THROW(resolve_step_sizes(-1, 0, cpu), Error);
}

TEST(ServeDefaults, PoolOnADeviceIsWhatTheFractionLeavesAfterWeightsAndActivations) {
  // 80 GiB card, 17 GiB in use (weights, context), 0.9 allowed, 3 GiB kept for activations:
  // 72 - 17 - 3 = 52 GiB of KV.
  const std::int64_t block = 2 << 20;
  const KvPoolPlan p = plan_kv_pool({.gpu_memory_fraction = 0.9,
                                     .device = DeviceMemory{.free_bytes = 63 * kGiB, .total_bytes = 80 * kGiB},
                                     .reserve_bytes = 3 * kGiB,
                                     .block_bytes = block});
  const auto allowed = static_cast<std::int64_t>(0.9 * static_cast<double>(80 * kGiB));
  EXPECT_EQ(p.n_blocks, (allowed - 17 * kGiB - 3 * kGiB) / block);
  EXPECT_EQ(p.bytes, std::int64_t{p.n_blocks} * block);
  EXPECT_NE(p.how.find("--gpu-memory-fraction"), std::string::npos);
}

TEST(ServeDefaults, PoolNeverExceedsFreeMemory) {
  // Another process holds most of the card: free memory, not the fraction, is the bound.
  const KvPoolPlan p = plan_kv_pool({.gpu_memory_fraction = 1.0,
                                     .device = DeviceMemory{.free_bytes = 10 * kGiB, .total_bytes = 80 * kGiB},
                                     .reserve_bytes = 2 * kGiB,
                                     .block_bytes = kGiB / 4});
  EXPECT_EQ(p.n_blocks, 32);
}

TEST(ServeDefaults, KvCacheMbOverridesAndTheCpuHasADefault) {
  const KvPoolPlan mb = plan_kv_pool({.kv_cache_mb = 3000,
                                      .device = DeviceMemory{.free_bytes = 63 * kGiB, .total_bytes = 80 * kGiB},
                                      .block_bytes = 2 << 20});
  EXPECT_EQ(mb.n_blocks, 1500);
  const KvPoolPlan cpu = plan_kv_pool({.device = std::nullopt, .block_bytes = 1 << 20});
  EXPECT_EQ(cpu.n_blocks, 1024);
}

TEST(ServeDefaults, TooSmallAPoolIsAnErrorNamingTheFlags) {
  try {
    plan_kv_pool({.gpu_memory_fraction = 0.2,
                  .device = DeviceMemory{.free_bytes = 63 * kGiB, .total_bytes = 80 * kGiB},
                  .block_bytes = 2 << 20});
    FAIL() << "17 GiB in use leaves nothing under 0.2 of 80 GiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-memory-fraction"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_kv_pool({.gpu_memory_fraction = 1.5, .device = std::nullopt, .block_bytes = 1}), Error);
  EXPECT_THROW(plan_kv_pool({.kv_cache_mb = -1, .device = std::nullopt, .block_bytes = 1}), Error);
}

TEST(ServeDefaults, ActivationReserveGrowsWithTheStep) {
  ModelConfig c;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  const std::int64_t small = activation_reserve_bytes(c, 512), big = activation_reserve_bytes(c, 8192);
  EXPECT_GT(big, small);
  EXPECT_GT(big, 8192LL * 4 * 4096 * 3);  // at least the f32 hidden-state workspaces
  EXPECT_LT(big, 8 * kGiB);
}

}  // namespace
}  // namespace akv
