// `laminar bench delta CHECKPOINT...`: the bytes per version a relay link carries for consecutive
// versions of a real run (each a training checkpoint's model.safetensors, oldest first): whole, as
// an exact delta and as 8- and 4-bit deltas with error feedback (relay/delta.h), with the fraction
// of elements changed, the receivers' error, and the measured time to encode and to apply each.
// Every delta is applied to a receiver's copy, which must equal what the encoder says it holds.
// --dtype bf16 rounds the f32 weights to bf16 first: versions published in bf16.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench/bench_command.h"
#include "core/dtype.h"
#include "model/safetensors.h"
#include "relay/delta.h"
#include "relay/wire.h"

namespace laminar::cli {
namespace {

struct DeltaBenchArgs {
  std::vector<std::string> checkpoints;
  int full_every = 8;
  std::string dtype = "f32";  // what versions are published in: f32 (as trained) or bf16
};

// One version: its manifest and flat buffer (the relay's layout).
struct FlatVersion {
  proto::WeightManifest manifest;
  std::vector<uint8_t> bytes;
};

// The version in `path`, its f32 tensors rounded to bf16 when `bf16`.
StatusOr<FlatVersion> ReadVersion(const std::string& path, int64_t version, bool bf16) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = path + "/model.safetensors";
  LAMINAR_ASSIGN_OR_RETURN(model::SafetensorsFile st, model::SafetensorsFile::Open(file));
  std::vector<relay::TensorBytes> tensors;
  std::vector<std::vector<uint16_t>> rounded;
  rounded.reserve(st.tensors().size());
  for (const model::SafetensorsTensor& t : st.tensors()) {
    if (bf16 && t.dtype == DType::kF32) {
      std::vector<uint16_t>& r = rounded.emplace_back(t.size_bytes / 4);
      for (size_t i = 0; i < r.size(); ++i) {
        float f = 0;
        std::memcpy(&f, t.data + 4 * i, 4);
        r[i] = FloatToBF16(f);
      }
      tensors.push_back({t.name,
                         DType::kBF16,
                         t.shape.dims(),
                         {reinterpret_cast<const uint8_t*>(r.data()), r.size() * 2}});
      continue;
    }
    tensors.push_back({t.name, t.dtype, t.shape.dims(), {t.data, t.size_bytes}});
  }
  FlatVersion v;
  LAMINAR_ASSIGN_OR_RETURN(v.manifest, relay::LayoutManifest(version, tensors, 4 << 20));
  v.bytes.resize(v.manifest.total_bytes());
  relay::CopyToLayout(v.manifest, tensors, v.bytes);
  return v;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int RunDelta(const DeltaBenchArgs& a) {
  if (a.checkpoints.size() < 2) {
    return BenchFail(
        InvalidArgumentError("bench delta: give two or more checkpoints, oldest "
                             "first (step folders or .safetensors files)"));
  }
  std::vector<FlatVersion> versions;
  for (size_t i = 0; i < a.checkpoints.size(); ++i) {
    auto v = ReadVersion(a.checkpoints[i], static_cast<int64_t>(i), a.dtype == "bf16");
    if (!v.ok()) return BenchFail(v.status());
    versions.push_back(std::move(*v));
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const relay::DeltaCoding coding :
       {relay::DeltaCoding::kExact, relay::DeltaCoding::kInt8, relay::DeltaCoding::kInt4}) {
    relay::DeltaEncoder encoder(coding, a.full_every);
    std::vector<uint8_t> receiver;
    for (size_t i = 0; i < versions.size(); ++i) {
      const FlatVersion& v = versions[i];
      const auto version = static_cast<int64_t>(i);
      auto t0 = std::chrono::steady_clock::now();
      auto u = encoder.Next(v.manifest, version, {v.bytes.data(), v.bytes.size()});
      const double encode_s = Seconds(t0);
      if (!u.ok()) return BenchFail(u.status());
      double apply_s = 0;
      if (u->full) {
        receiver = v.bytes;
      } else {
        t0 = std::chrono::steady_clock::now();
        Status s = relay::ApplyDelta(u->delta, v.manifest, version - 1,
                                     {receiver.data(), receiver.size()}, a.checkpoints[i]);
        apply_s = Seconds(t0);
        if (!s.ok()) return BenchFail(s);
      }
      if (!std::ranges::equal(receiver, encoder.held())) {
        return BenchFail(InternalError("bench delta: the receiver of version " +
                                       std::to_string(version) +
                                       " does not hold what the encoder holds"));
      }
      const relay::DeltaStats& st = u->stats;
      if (st.elements == 0 || st.full_bytes == 0) {
        return BenchFail(
            InvalidArgumentError("bench delta: " + a.checkpoints[i] + " holds no tensor elements"));
      }
      rows.push_back({{"coding", relay::DeltaCodingName(coding)},
                      {"version", version},
                      {"full", u->full},
                      {"bytes", st.bytes},
                      {"full_bytes", st.full_bytes},
                      {"fraction_of_full", static_cast<double>(st.bytes) / st.full_bytes},
                      {"changed_fraction", static_cast<double>(st.changed) / st.elements},
                      {"max_abs_error", st.max_abs_error},
                      {"encode_s", encode_s},
                      {"apply_s", apply_s}});
      std::fprintf(stderr,
                   "%-5s v%-3lld %-5s %11.1f MB (%5.1f%% of whole)  changed %5.1f%%  "
                   "max error %.3g  encode %.3f s  apply %.3f s\n",
                   std::string(relay::DeltaCodingName(coding)).c_str(),
                   static_cast<long long>(version), u->full ? "whole" : "delta", st.bytes / 1e6,
                   100.0 * static_cast<double>(st.bytes) / st.full_bytes,
                   100.0 * static_cast<double>(st.changed) / st.elements, st.max_abs_error,
                   encode_s, apply_s);
    }
  }
  nlohmann::json out = {{"checkpoints", a.checkpoints},
                        {"dtype", a.dtype},
                        {"full_every", a.full_every},
                        {"versions", rows}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupDelta(CLI::App* app) {
  auto a = std::make_shared<DeltaBenchArgs>();
  app->add_option("checkpoints", a->checkpoints,
                  "consecutive versions, oldest first: training checkpoint folders (step_N) or "
                  ".safetensors files")
      ->required();
  app->add_option("--full-every", a->full_every, "a whole version every K versions")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--dtype", a->dtype,
                  "what versions are published in: f32 (as trained) or bf16 (rounded)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  return [a] { return RunDelta(*a); };
}

}  // namespace

LAMINAR_REGISTER_BENCH("delta", "bytes per version as exact, 8-bit and 4-bit deltas", SetupDelta);

}  // namespace laminar::cli
