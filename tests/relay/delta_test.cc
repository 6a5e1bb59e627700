// Weight deltas between versions (relay/delta.h) against the plain reference (the version's bytes
// themselves): exact deltas rebuild a version bit for bit from only its changed elements, lossy
// ones stay within their bound with error feedback, a wrong base or a damaged delta is refused.
#include "relay/delta.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "relay/wire.h"

namespace laminar::relay {
namespace {

// A version of four tensors (f32, bf16, i32 and a f32 of a partial block) in one flat buffer.
struct Version {
  proto::WeightManifest manifest;
  std::vector<uint8_t> bytes;

  float F32(const std::string& name, size_t i) const { return LoadAsFloat(name, i); }
  size_t Count(const std::string& name) const {
    const proto::TensorEntry& t = Entry(name);
    return t.size_bytes() / (t.dtype() == "bf16" ? 2 : 4);
  }
  const proto::TensorEntry& Entry(const std::string& name) const {
    for (const auto& t : manifest.tensors()) {
      if (t.name() == name) return t;
    }
    ADD_FAILURE() << "no tensor " << name;
    return manifest.tensors(0);
  }
  float LoadAsFloat(const std::string& name, size_t i) const {
    const proto::TensorEntry& t = Entry(name);
    const uint8_t* p = bytes.data() + t.offset();
    if (t.dtype() == "bf16") {
      uint16_t b = 0;
      std::memcpy(&b, p + 2 * i, 2);
      return BF16ToFloat(b);
    }
    float f = 0;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  void Store(const std::string& name, size_t i, float v) {
    const proto::TensorEntry& t = Entry(name);
    uint8_t* p = bytes.data() + t.offset();
    if (t.dtype() == "bf16") {
      const uint16_t b = FloatToBF16(v);
      std::memcpy(p + 2 * i, &b, 2);
    } else if (t.dtype() == "i32") {
      const auto n = static_cast<int32_t>(v);
      std::memcpy(p + 4 * i, &n, 4);
    } else {
      std::memcpy(p + 4 * i, &v, 4);
    }
  }
};

Version MakeVersion(int64_t version, uint32_t seed) {
  const std::vector<std::pair<std::string, std::pair<DType, size_t>>> spec = {
      {"w", {DType::kF32, 1000}},
      {"e", {DType::kBF16, 300}},
      {"ids", {DType::kI32, 10}},
      {"odd", {DType::kF32, 70}}};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorBytes> tensors;
  for (const auto& [name, what] : spec) {
    storage.emplace_back(what.second * DTypeSize(what.first), 0);
    tensors.push_back({name, what.first, {static_cast<int64_t>(what.second)}, storage.back()});
  }
  Version v;
  v.manifest = *LayoutManifest(version, tensors, 4096);
  v.bytes.assign(v.manifest.total_bytes(), 0);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 0.05f);
  for (const auto& [name, what] : spec) {
    for (size_t i = 0; i < what.second; ++i) {
      v.Store(name, i, what.first == DType::kI32 ? static_cast<float>(i) : normal(rng));
    }
  }
  return v;
}

std::span<uint8_t> Span(std::vector<uint8_t>& b) { return {b.data(), b.size()}; }
std::span<const uint8_t> CSpan(const std::vector<uint8_t>& b) { return {b.data(), b.size()}; }

TEST(WeightDeltaTest, ExactDeltaCarriesOnlyTheChangedElementsAndRebuildsTheVersionBitForBit) {
  const Version v0 = MakeVersion(0, 1);
  Version v1 = v0;
  v1.manifest.set_version(1);
  for (size_t i = 0; i < 1000; i += 97) v1.Store("w", i, v0.F32("w", i) + 1e-3f);
  for (size_t i = 0; i < 300; i += 50) v1.Store("e", i, v0.F32("e", i) * 2);
  v1.Store("ids", 3, 42);

  std::vector<uint8_t> sender = v0.bytes, receiver = v0.bytes;
  DeltaStats stats;
  auto delta =
      EncodeDelta(v1.manifest, DeltaCoding::kExact, 0, Span(sender), 1, CSpan(v1.bytes), &stats);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(stats.changed, 11u + 6u + 1u);
  EXPECT_EQ(stats.elements, 1380u);
  EXPECT_EQ(stats.bytes, delta->size());
  EXPECT_LT(stats.bytes * 20, stats.full_bytes) << stats.bytes << " of " << stats.full_bytes;
  EXPECT_EQ(stats.max_abs_error, 0);
  ASSERT_TRUE(ApplyDelta(*delta, v1.manifest, 0, Span(receiver), "test").ok());
  EXPECT_EQ(receiver, v1.bytes);
  EXPECT_EQ(sender, v1.bytes);

  // Every element changed (f32 weights after an Adam step): no larger than the version whole.
  Version v2 = v1;
  v2.manifest.set_version(2);
  for (size_t i = 0; i < 1000; ++i) v2.Store("w", i, v1.F32("w", i) * 0.999f);
  auto dense =
      EncodeDelta(v2.manifest, DeltaCoding::kExact, 1, Span(sender), 2, CSpan(v2.bytes), &stats);
  ASSERT_TRUE(dense.ok());
  EXPECT_LE(dense->size(), 4000 + 256) << "w whole, the rest unchanged";
  ASSERT_TRUE(ApplyDelta(*dense, v2.manifest, 1, Span(receiver), "test").ok());
  EXPECT_EQ(receiver, v2.bytes);
}

// Under a lossy coding a tensor whose exact section is smaller (few elements changed: bf16
// weights under small steps) still goes exactly: fewer bytes, no error.
TEST(WeightDeltaTest, ALossyDeltaSendsASparselyChangedTensorExactly) {
  const Version v0 = MakeVersion(0, 1);
  Version v1 = v0;
  v1.manifest.set_version(1);
  for (size_t i = 0; i < 1000; i += 97) v1.Store("w", i, v0.F32("w", i) + 1e-3f);
  std::vector<uint8_t> exact_held = v0.bytes, lossy_held = v0.bytes, receiver = v0.bytes;
  auto exact =
      EncodeDelta(v1.manifest, DeltaCoding::kExact, 0, Span(exact_held), 1, CSpan(v1.bytes));
  DeltaStats stats;
  auto lossy =
      EncodeDelta(v1.manifest, DeltaCoding::kInt4, 0, Span(lossy_held), 1, CSpan(v1.bytes), &stats);
  ASSERT_TRUE(exact.ok() && lossy.ok());
  EXPECT_EQ(lossy->size(), exact->size());
  EXPECT_EQ(stats.max_abs_error, 0);
  EXPECT_EQ(stats.changed, 11u);
  ASSERT_TRUE(ApplyDelta(*lossy, v1.manifest, 0, Span(receiver), "r").ok());
  EXPECT_EQ(receiver, v1.bytes);
}

TEST(WeightDeltaTest, AWrongBaseIsRefusedAndLeavesTheHeldVersionAlone) {
  const Version v0 = MakeVersion(0, 1);
  const Version v1 = MakeVersion(1, 2);
  std::vector<uint8_t> sender = v0.bytes;
  auto delta = EncodeDelta(v1.manifest, DeltaCoding::kExact, 0, Span(sender), 1, CSpan(v1.bytes));
  ASSERT_TRUE(delta.ok());

  std::vector<uint8_t> late = v1.bytes;  // a receiver that holds another version
  Status s = ApplyDelta(*delta, v1.manifest, 7, Span(late), "relay r1");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("relay r1: delta 0 -> 1 needs version 0, version 7 is held"),
            std::string::npos)
      << s;
  EXPECT_EQ(late, v1.bytes);

  std::vector<uint8_t> drifted = v0.bytes;  // version 0 by number, other bytes
  drifted[v0.manifest.tensors(0).offset() + 5] ^= 1;
  const std::vector<uint8_t> before = drifted;
  s = ApplyDelta(*delta, v1.manifest, 0, Span(drifted), "relay r1");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not its base"), std::string::npos) << s;
  EXPECT_EQ(drifted, before);

  std::vector<uint8_t> short_buffer(v0.bytes.begin(), v0.bytes.end() - 1);
  EXPECT_FALSE(ApplyDelta(*delta, v1.manifest, 0, Span(short_buffer), "relay r1").ok());
}

// A damaged delta never gives other bytes than the ones it names: every truncation is an error,
// and every flipped byte is an error or changes nothing (a scale's last bits under bf16 rounding).
TEST(WeightDeltaTest, ADamagedDeltaIsRefusedOrGivesExactlyTheBytesItNames) {
  const Version v0 = MakeVersion(0, 1);
  Version v1 = v0;
  v1.manifest.set_version(1);
  // Enough changed that the lossy codings quantize these tensors rather than send them exactly.
  for (size_t i = 0; i < 1000; i += 3) v1.Store("w", i, v0.F32("w", i) + 0.5f);
  for (size_t i = 0; i < 300; i += 2) v1.Store("e", i, v0.F32("e", i) + 0.5f);
  v1.Store("odd", 69, 3);
  for (const DeltaCoding coding : {DeltaCoding::kExact, DeltaCoding::kInt8, DeltaCoding::kInt4}) {
    std::vector<uint8_t> sender = v0.bytes;
    auto delta = EncodeDelta(v1.manifest, coding, 0, Span(sender), 1, CSpan(v1.bytes));
    ASSERT_TRUE(delta.ok());
    for (size_t n = 0; n < delta->size(); ++n) {
      std::vector<uint8_t> held = v0.bytes;
      EXPECT_FALSE(ApplyDelta(delta->substr(0, n), v1.manifest, 0, Span(held), "t").ok()) << n;
    }
    int refused = 0;
    for (size_t k = 0; k < delta->size(); ++k) {
      std::string bad = *delta;
      bad[k] = static_cast<char>(bad[k] ^ 0x10);
      std::vector<uint8_t> held = v0.bytes;
      if (ApplyDelta(bad, v1.manifest, 0, Span(held), "t").ok()) {
        EXPECT_EQ(held, sender) << DeltaCodingName(coding) << " byte " << k;
      } else {
        ++refused;
      }
    }
    EXPECT_GT(refused * 10, static_cast<int>(delta->size()) * 9) << DeltaCodingName(coding);
  }
}

// Sections made by hand, as a hostile peer would: counts past the tensor, an index at its end,
// overlong indices, a section of the wrong kind. Each is DataLoss, and nothing is written.
TEST(WeightDeltaTest, CraftedSectionsAreRefusedBeforeAByteIsWritten) {
  const Version v0 = MakeVersion(0, 1);
  Version v1 = v0;
  v1.manifest.set_version(1);
  v1.Store("odd", 69, 3);
  std::vector<uint8_t> sender = v0.bytes;
  auto valid = EncodeDelta(v1.manifest, DeltaCoding::kExact, 0, Span(sender), 1, CSpan(v1.bytes));
  ASSERT_TRUE(valid.ok());
  // The header and the sections of w, e and ids (unchanged: kind, count 0, no index bytes).
  const std::string head = valid->substr(0, 56 + 3 * 17);
  auto section = [](uint64_t count, const std::string& gaps, size_t values, uint8_t kind = 1) {
    std::string out(1, static_cast<char>(kind));
    const uint64_t gap_bytes = gaps.size();
    out.append(reinterpret_cast<const char*>(&count), 8);
    out.append(reinterpret_cast<const char*>(&gap_bytes), 8);
    return out + gaps + std::string(values, '\x01');
  };
  const std::vector<std::pair<std::string, std::string>> crafted = {
      {section(71, std::string(71, '\0'), 71 * 4), "claims 71 elements"},
      {section(1, std::string(1, '\x46'), 4), "index 0 of tensor 'odd' is past its 70"},
      {section(2, std::string("\x45\x00", 2), 8), "index 1 of tensor 'odd' is past its 70"},
      {section(1, std::string(11, '\xff'), 4), "index 0 of tensor 'odd' is malformed"},
      {section(1, std::string("\x01\x01"), 4), "have bytes left over"},
      {section(0, "", 0, 2), "has kind 2"},
      {section(0, "", 0, 9), "has kind 9"},
      {section(0, "", 0) + "x", "1 bytes after its sections"}};
  for (const auto& [bad, expected] : crafted) {
    std::vector<uint8_t> held = v0.bytes;
    Status s = ApplyDelta(head + bad, v1.manifest, 0, Span(held), "peer");
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s;
    EXPECT_EQ(held, v0.bytes);
  }
  std::string huge_gap_bytes = section(1, "", 4);
  const uint64_t huge = uint64_t{1} << 63;
  std::memcpy(huge_gap_bytes.data() + 9, &huge, 8);
  std::vector<uint8_t> held = v0.bytes;
  EXPECT_EQ(ApplyDelta(head + huge_gap_bytes, v1.manifest, 0, Span(held), "peer").code(),
            StatusCode::kDataLoss);

  // A manifest whose tensors overlap is refused; an empty tensor anywhere is fine.
  proto::WeightManifest overlapping = v1.manifest;
  overlapping.mutable_tensors(1)->set_offset(overlapping.tensors(0).offset() + 8);
  EXPECT_EQ(ApplyDelta(*valid, overlapping, 0, Span(held), "peer").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDelta(overlapping, DeltaCoding::kExact, 0, Span(held), 1, CSpan(v1.bytes))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  Version with_empty = v0;
  proto::TensorEntry* empty = with_empty.manifest.add_tensors();
  empty->set_name("empty");
  empty->set_dtype("f32");
  empty->set_offset(8);
  empty->set_size_bytes(0);
  Version target = with_empty;
  target.manifest.set_version(1);
  target.Store("w", 0, 7);
  std::vector<uint8_t> s2 = with_empty.bytes, r2 = with_empty.bytes;
  auto d = EncodeDelta(target.manifest, DeltaCoding::kInt8, 0, Span(s2), 1, CSpan(target.bytes));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(ApplyDelta(*d, target.manifest, 0, Span(r2), "peer").ok());
  EXPECT_EQ(r2, s2);
}

// The stream of versions an optimizer makes: small steps on every weight, now and then a large
// one. Each lossy delta codes what the receivers lack; their error stays within a step of the
// quantization, where quantizing each version's own difference lets the error add up.
TEST(WeightDeltaTest, QuantizedDeltasWithErrorFeedbackStayWithinOneQuantizationStep) {
  for (const DeltaCoding coding : {DeltaCoding::kInt8, DeltaCoding::kInt4}) {
    const double qmax = coding == DeltaCoding::kInt8 ? 127 : 7;
    Version target = MakeVersion(0, 1);
    DeltaEncoder encoder(coding, /*full_every=*/1000);
    auto first = encoder.Next(target.manifest, 0, CSpan(target.bytes));
    ASSERT_TRUE(first.ok() && first->full);
    std::vector<uint8_t> receiver = target.bytes;
    std::vector<uint8_t> naive = target.bytes;  // each version's own difference, quantized
    Version previous = target;
    std::mt19937 rng(3);
    std::normal_distribution<float> step(0, 1e-3f);
    double feedback_error = 0;
    for (int64_t v = 1; v < 30; ++v) {  // large steps at 10 and 20, small ones last
      target.manifest.set_version(v);
      double largest_step = 0;
      for (const std::string name : {"w", "e", "odd"}) {
        for (size_t i = 0; i < target.Count(name); ++i) {
          const float x = target.F32(name, i) + step(rng) * (v % 10 == 0 ? 50.0f : 1.0f);
          target.Store(name, i, x);
        }
      }
      Version held{target.manifest,
                   std::vector<uint8_t>(encoder.held().begin(), encoder.held().end())};
      for (const std::string name : {"w", "e", "odd"}) {
        for (size_t i = 0; i < target.Count(name); ++i) {
          largest_step = std::max(largest_step, std::fabs(static_cast<double>(target.F32(name, i)) -
                                                          held.F32(name, i)));
        }
      }
      auto u = encoder.Next(target.manifest, v, CSpan(target.bytes));
      ASSERT_TRUE(u.ok()) << u.status();
      ASSERT_FALSE(u->full);
      EXPECT_LT(u->stats.bytes * (coding == DeltaCoding::kInt8 ? 3 : 5), u->stats.full_bytes);
      ASSERT_TRUE(ApplyDelta(u->delta, target.manifest, v - 1, Span(receiver), "r").ok()) << v;
      ASSERT_TRUE(std::equal(receiver.begin(), receiver.end(), encoder.held().begin()));
      // The receivers' error, measured, is the one reported, and within one quantization step
      // of the largest difference it coded (half a step, and bf16's rounding).
      Version got{target.manifest, receiver};
      double error = 0;
      for (const std::string name : {"w", "e", "odd"}) {
        for (size_t i = 0; i < target.Count(name); ++i) {
          error = std::max(error,
                           std::fabs(static_cast<double>(target.F32(name, i)) - got.F32(name, i)));
        }
      }
      EXPECT_DOUBLE_EQ(error, u->stats.max_abs_error);
      EXPECT_LE(error, largest_step / qmax + 1e-6) << DeltaCodingName(coding) << " version " << v;
      feedback_error = error;
      EXPECT_EQ(got.bytes, std::vector<uint8_t>(encoder.held().begin(), encoder.held().end()));
      // Without feedback: this version's own difference quantized, added to what the last gave.
      std::vector<uint8_t> scratch = previous.bytes;
      ASSERT_TRUE(
          EncodeDelta(target.manifest, coding, v - 1, Span(scratch), v, CSpan(target.bytes)).ok());
      const Version quantized{target.manifest, scratch};
      Version n{target.manifest, naive};
      for (const std::string name : {"w", "e", "odd"}) {
        for (size_t i = 0; i < target.Count(name); ++i) {
          n.Store(name, i, n.F32(name, i) + (quantized.F32(name, i) - previous.F32(name, i)));
        }
      }
      naive = n.bytes;
      previous = target;
    }
    Version n{target.manifest, naive};
    double naive_error = 0;
    for (size_t i = 0; i < target.Count("w"); ++i) {
      naive_error =
          std::max(naive_error, std::fabs(static_cast<double>(target.F32("w", i)) - n.F32("w", i)));
    }
    EXPECT_LT(feedback_error * 2, naive_error) << DeltaCodingName(coding);
  }
}

TEST(WeightDeltaTest, TheEncoderSendsAFullSnapshotEveryKVersionsAndWhenAsked) {
  Version v = MakeVersion(0, 1);
  DeltaEncoder encoder(DeltaCoding::kExact, /*full_every=*/3);
  std::vector<bool> full;
  std::vector<uint8_t> receiver;
  for (int64_t version = 0; version < 8; ++version) {
    v.manifest.set_version(version);
    v.Store("w", static_cast<size_t>(version), 1.0f + static_cast<float>(version));
    if (version == 5) encoder.ForceFull();
    auto u = encoder.Next(v.manifest, version, CSpan(v.bytes));
    ASSERT_TRUE(u.ok()) << u.status();
    full.push_back(u->full);
    if (u->full) {
      receiver = v.bytes;
    } else {
      ASSERT_TRUE(ApplyDelta(u->delta, v.manifest, version - 1, Span(receiver), "r").ok());
      EXPECT_EQ(u->stats.changed, 1u);
    }
    EXPECT_EQ(receiver, v.bytes);
  }
  EXPECT_EQ(full, (std::vector<bool>{true, false, false, true, false, true, false, false}));
  EXPECT_FALSE(encoder.Next(v.manifest, 7, CSpan(v.bytes)).ok()) << "versions only go up";

  // Another layout (a tensor renamed), right after a full version, is sent whole.
  DeltaEncoder relayout(DeltaCoding::kExact, /*full_every=*/100);
  ASSERT_TRUE(relayout.Next(v.manifest, 0, CSpan(v.bytes)).ok());
  auto same = relayout.Next(v.manifest, 1, CSpan(v.bytes));
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->full);
  Version other = MakeVersion(2, 1);
  other.manifest.mutable_tensors(0)->set_name("renamed");
  auto renamed = relayout.Next(other.manifest, 2, CSpan(other.bytes));
  ASSERT_TRUE(renamed.ok());
  EXPECT_TRUE(renamed->full);

  // A non-finite weight cannot ride a lossy delta: that version goes whole, and the next finite
  // one repairs the tensor exactly (a lossy step from a NaN would keep it).
  DeltaEncoder lossy(DeltaCoding::kInt4, 100);
  const Version finite = other;
  ASSERT_TRUE(lossy.Next(other.manifest, 0, CSpan(other.bytes)).ok());
  other.Store("renamed", 3, std::numeric_limits<float>::quiet_NaN());
  other.manifest.set_version(1);
  auto nan = lossy.Next(other.manifest, 1, CSpan(other.bytes));
  ASSERT_TRUE(nan.ok());
  EXPECT_TRUE(nan->full);
  std::vector<uint8_t> receiver_of_nan = other.bytes;
  Version repaired = finite;
  repaired.manifest.set_version(2);
  for (size_t i = 0; i < 1000; ++i) repaired.Store("renamed", i, finite.F32("renamed", i) + 1e-3f);
  auto after = lossy.Next(repaired.manifest, 2, CSpan(repaired.bytes));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->full);
  ASSERT_TRUE(ApplyDelta(after->delta, repaired.manifest, 1, Span(receiver_of_nan), "r").ok());
  EXPECT_EQ(receiver_of_nan, repaired.bytes);
  other.manifest.set_version(2);
  std::vector<uint8_t> held = other.bytes;
  auto refused =
      EncodeDelta(other.manifest, DeltaCoding::kInt8, 1, Span(held), 2, CSpan(other.bytes));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("element 3 of tensor 'renamed' is not finite"),
            std::string::npos)
      << refused.status();

  EXPECT_FALSE(ParseDeltaCoding("int2").ok());
  EXPECT_EQ(*ParseDeltaCoding("int4"), DeltaCoding::kInt4);
}

}  // namespace
}  // namespace laminar::relay
