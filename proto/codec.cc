// Message invariants and the chunk checksum.
#include "proto/codec.h"

#include <google/protobuf/stubs/logging.h>
#include <xxhash.h>

#include <cmath>

#include "core/dtype.h"
#include "core/logging.h"
#include "core/tensor.h"

namespace laminar::proto {
namespace {

// libprotobuf logs an ERROR line for every string field with invalid UTF-8 it refuses to parse;
// a bad peer could flood stderr that way. Decode already returns a Status naming the peer, so
// the library's own lines go to our log at DEBUG (FATAL ones still at ERROR).
void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  if (level >= google::protobuf::LOGLEVEL_FATAL) {
    LAMINAR_LOG(ERROR, NET) << "protobuf " << file << ":" << line << ": " << message;
  } else {
    LAMINAR_LOG(DEBUG, NET) << "protobuf " << file << ":" << line << ": " << message;
  }
}

[[maybe_unused]] const bool kProtobufLogRouted = [] {
  google::protobuf::SetLogHandler(&ProtobufLog);
  return true;
}();

Status Bad(const std::string& what) { return InvalidArgumentError(what); }

template <typename Ids>
Status NonNegativeIds(const Ids& ids, const char* field) {
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) return Bad(std::string(field) + "[" + std::to_string(i) + "] is negative");
  }
  return OkStatus();
}

Status SameLength(int tokens, int logprobs) {
  if (tokens != logprobs) {
    return Bad("response_ids has " + std::to_string(tokens) + " tokens but logprobs has " +
               std::to_string(logprobs));
  }
  return OkStatus();
}

template <typename Logprobs>
Status ValidLogprobs(const Logprobs& lps) {
  for (int i = 0; i < lps.size(); ++i) {
    if (!std::isfinite(lps[i]) || lps[i] > 1e-4f) {
      return Bad("logprobs[" + std::to_string(i) + "] = " + std::to_string(lps[i]) +
                 " is not a log-probability");
    }
  }
  return OkStatus();
}

}  // namespace

uint64_t Checksum(std::string_view data) { return XXH64(data.data(), data.size(), 0); }

Status Validate(const PromptGroup& m) {
  if (m.prompt_id().empty()) return Bad("prompt_id is empty");
  if (m.num_samples() < 1 || m.num_samples() > 65536) {
    return Bad("num_samples = " + std::to_string(m.num_samples()) + " outside [1, 65536]");
  }
  if (m.prompt_ids().empty()) return Bad("prompt_ids is empty");
  return NonNegativeIds(m.prompt_ids(), "prompt_ids");
}

Status Validate(const PartialResponse& m) {
  if (m.prompt_id().empty()) return Bad("prompt_id is empty");
  if (m.sample_index() < 0) return Bad("sample_index is negative");
  if (m.version() < 0) return Bad("version is negative");
  if (m.offset() < 0) return Bad("offset is negative");
  LAMINAR_RETURN_IF_ERROR(SameLength(m.response_ids_size(), m.logprobs_size()));
  LAMINAR_RETURN_IF_ERROR(NonNegativeIds(m.response_ids(), "response_ids"));
  return ValidLogprobs(m.logprobs());
}

Status Validate(const Trajectory& m) {
  if (m.prompt_id().empty()) return Bad("prompt_id is empty");
  if (m.sample_index() < 0) return Bad("sample_index is negative");
  if (m.version() < 0) return Bad("version is negative");
  if (!FinishReason_IsValid(m.finish_reason()) || m.finish_reason() == FINISH_REASON_UNSPECIFIED) {
    return Bad("finish_reason " + std::to_string(m.finish_reason()) +
               " is not stop, length, abort or non_finite_logits");
  }
  if (!std::isfinite(m.reward())) return Bad("reward is not finite");
  if (!RewardOutcome_IsValid(m.reward_outcome())) {
    return Bad("reward_outcome " + std::to_string(m.reward_outcome()) +
               " is not ok, error or timeout");
  }
  LAMINAR_RETURN_IF_ERROR(SameLength(m.response_ids_size(), m.logprobs_size()));
  LAMINAR_RETURN_IF_ERROR(NonNegativeIds(m.prompt_ids(), "prompt_ids"));
  LAMINAR_RETURN_IF_ERROR(NonNegativeIds(m.response_ids(), "response_ids"));
  return ValidLogprobs(m.logprobs());
}

Status Validate(const MigratedSample& m) {
  if (m.prompt_id().empty()) return Bad("prompt_id is empty");
  if (m.sample_index() < 0) return Bad("sample_index is negative");
  if (m.version() < 0) return Bad("version is negative");
  if (m.prompt_ids_size() == 0) return Bad("prompt_ids is empty");
  LAMINAR_RETURN_IF_ERROR(NonNegativeIds(m.prompt_ids(), "prompt_ids"));
  LAMINAR_RETURN_IF_ERROR(NonNegativeIds(m.response_ids(), "response_ids"));
  LAMINAR_RETURN_IF_ERROR(SameLength(m.response_ids_size(), m.logprobs_size()));
  LAMINAR_RETURN_IF_ERROR(ValidLogprobs(m.logprobs()));
  if (m.top_logprobs_size() != 0 && m.top_logprobs_size() != m.response_ids_size()) {
    return Bad("top_logprobs has " + std::to_string(m.top_logprobs_size()) + " entries for " +
               std::to_string(m.response_ids_size()) + " response ids");
  }
  for (int i = 0; i < m.top_logprobs_size(); ++i) {
    const TopLogprobs& t = m.top_logprobs(i);
    if (t.ids_size() != t.logprobs_size()) {
      return Bad("top_logprobs[" + std::to_string(i) + "] has " + std::to_string(t.ids_size()) +
                 " ids and " + std::to_string(t.logprobs_size()) + " logprobs");
    }
    LAMINAR_RETURN_IF_ERROR(NonNegativeIds(t.ids(), "top_logprobs.ids"));
    LAMINAR_RETURN_IF_ERROR(ValidLogprobs(t.logprobs()));
  }
  if (m.sampling().max_tokens() <= m.response_ids_size()) {
    return Bad("sampling.max_tokens " + std::to_string(m.sampling().max_tokens()) +
               " leaves nothing to generate after " + std::to_string(m.response_ids_size()) +
               " response ids");
  }
  if (m.rng_state_size() != 4) {
    return Bad("rng_state has " + std::to_string(m.rng_state_size()) + " words, not 4");
  }
  if (m.rng_state(0) == 0 && m.rng_state(1) == 0 && m.rng_state(2) == 0 && m.rng_state(3) == 0) {
    return Bad("rng_state is all zero (not a xoshiro256** state)");
  }
  if (m.stop_text_bytes() < 0) return Bad("stop_text_bytes is negative");
  return OkStatus();
}

Status Validate(const WeightManifest& m) {
  if (m.version() < 0) return Bad("version is negative");
  if (m.chunk_bytes() == 0) return Bad("chunk_bytes is 0");
  if (m.total_bytes() > kMaxVersionBytes) {
    return Bad("total_bytes " + std::to_string(m.total_bytes()) + " is above the limit of " +
               std::to_string(kMaxVersionBytes));
  }
  const uint64_t want_chunks =
      m.total_bytes() / m.chunk_bytes() + (m.total_bytes() % m.chunk_bytes() != 0);
  if (m.num_chunks() != want_chunks) {
    return Bad("num_chunks = " + std::to_string(m.num_chunks()) + " but " +
               std::to_string(m.total_bytes()) + " bytes in chunks of " +
               std::to_string(m.chunk_bytes()) + " need " + std::to_string(want_chunks));
  }
  if (static_cast<uint64_t>(m.chunk_xxhash64_size()) != want_chunks) {
    return Bad("chunk_xxhash64 has " + std::to_string(m.chunk_xxhash64_size()) + " entries for " +
               std::to_string(want_chunks) + " chunks");
  }
  for (const auto& t : m.tensors()) {
    DType dtype;
    if (!ParseDType(t.dtype(), &dtype))
      return Bad("tensor '" + t.name() + "' has dtype '" + t.dtype() + "'");
    std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
    auto bytes = CheckedNumBytes(dims, DTypeSize(dtype));
    if (!bytes.ok() || static_cast<uint64_t>(*bytes) != t.size_bytes()) {
      return Bad("tensor '" + t.name() + "' has size_bytes " + std::to_string(t.size_bytes()) +
                 " that its shape and dtype do not give");
    }
    if (t.offset() > m.total_bytes() || t.size_bytes() > m.total_bytes() - t.offset()) {
      return Bad("tensor '" + t.name() + "' [offset " + std::to_string(t.offset()) + ", " +
                 std::to_string(t.size_bytes()) + " bytes] runs past total_bytes " +
                 std::to_string(m.total_bytes()));
    }
  }
  return OkStatus();
}

Status Validate(const WeightChunk& m) {
  if (m.version() < 0) return Bad("version is negative");
  if (Checksum(m.data()) != m.xxhash64()) {
    return DataLossError("chunk " + std::to_string(m.index()) + " of version " +
                         std::to_string(m.version()) + " fails its xxHash64 checksum");
  }
  return OkStatus();
}

Status Validate(const Heartbeat& m) {
  if (m.id().empty()) return Bad("id is empty");
  if (m.running() < 0 || m.waiting() < 0) return Bad("running/waiting is negative");
  if (m.kv_blocks_used() < 0 || m.kv_blocks_capacity() < 0 || m.kv_blocks_used_previous() < 0 ||
      m.kv_blocks_used() > m.kv_blocks_capacity()) {
    return Bad("kv_blocks_used " + std::to_string(m.kv_blocks_used()) + " outside [0, capacity " +
               std::to_string(m.kv_blocks_capacity()) + "]");
  }
  if (m.unanswered() < 0 || !(m.unanswered_s() >= 0) || !std::isfinite(m.unanswered_s())) {
    return Bad("unanswered is negative, or unanswered_s negative or not finite");
  }
  return OkStatus();
}

Status Validate(const Stats& m) {
  if (m.id().empty()) return Bad("id is empty");
  if (!(m.interval_s() >= 0)) return Bad("interval_s is negative or NaN");
  for (const auto& [name, value] : m.values()) {
    if (name.empty()) return Bad("a metric has an empty name");
    if (!std::isfinite(value)) return Bad("metric '" + name + "' is not finite");
  }
  return OkStatus();
}

Status Validate(const WorkRequest& m) {
  if (m.rollout_id().empty()) return Bad("rollout_id is empty");
  if (m.max_groups() < 0) return Bad("max_groups is negative");
  return OkStatus();
}

Status Validate(const WorkReply& m) {
  for (int i = 0; i < m.groups_size(); ++i) {
    LAMINAR_RETURN_IF_ERROR(Validate(m.groups(i)), "groups[" + std::to_string(i) + "]");
  }
  return OkStatus();
}

Status Validate(const RepackCommand& m) {
  if (m.source().empty() || m.destination().empty()) return Bad("source or destination is empty");
  if (m.source() == m.destination()) return Bad("source and destination are both " + m.source());
  if (m.version() < 0) return Bad("version is negative");
  return OkStatus();
}

Status Validate(const VersionQuery&) { return OkStatus(); }

Status Validate(const VersionReply& m) {
  if (m.latest_complete_version() < -1) return Bad("latest_complete_version below -1");
  return OkStatus();
}

Status Validate(const RelayBroadcast& m) {
  LAMINAR_RETURN_IF_ERROR(BroadcastManifest(m).status());
  for (int i = 0; i < m.route_size(); ++i) {
    if (m.route(i).empty()) return Bad("route[" + std::to_string(i) + "] is empty");
  }
  return OkStatus();
}

StatusOr<WeightManifest> BroadcastManifest(const RelayBroadcast& m) {
  if (Checksum(m.manifest()) != m.manifest_xxhash64()) {
    return DataLossError("manifest fails its xxHash64 checksum");
  }
  WeightManifest manifest;
  if (m.manifest().size() > static_cast<size_t>(INT32_MAX) ||
      !manifest.ParseFromArray(m.manifest().data(), static_cast<int>(m.manifest().size()))) {
    return DataLossError("manifest is malformed (" + std::to_string(m.manifest().size()) +
                         " bytes)");
  }
  LAMINAR_RETURN_IF_ERROR(Validate(manifest), "manifest");
  return manifest;
}

void SetBroadcastManifest(const WeightManifest& manifest, RelayBroadcast* m) {
  m->set_manifest(manifest.SerializeAsString());
  m->set_manifest_xxhash64(Checksum(m->manifest()));
}

namespace {

template <typename List>
Status ValidateEach(const List& list, const std::string& field) {
  for (int i = 0; i < list.size(); ++i) {
    LAMINAR_RETURN_IF_ERROR(Validate(list.Get(i)), field + "[" + std::to_string(i) + "]");
  }
  return OkStatus();
}

}  // namespace

Status Validate(const ManagerRequest& m) {
  switch (m.kind_case()) {
    case ManagerRequest::kWork:
      return Validate(m.work());
    case ManagerRequest::kHeartbeat:
      return Validate(m.heartbeat());
    case ManagerRequest::kTrajectories:
      return ValidateEach(m.trajectories().trajectories(), "trajectories");
    case ManagerRequest::kPartials:
      return ValidateEach(m.partials().partials(), "partials");
    case ManagerRequest::kMigrated:
      if (m.migrated().source().empty()) return Bad("migrated: source is empty");
      return ValidateEach(m.migrated().samples(), "migrated.samples");
    case ManagerRequest::kTakeBatch:
      if (m.take_batch().num_groups() < 1) return Bad("take_batch: num_groups must be >= 1");
      return OkStatus();
    case ManagerRequest::kVersion:
      if (m.version().version() < 0) return Bad("version: version is negative");
      return OkStatus();
    case ManagerRequest::kReturned:
      if (m.returned().rollout_id().empty()) return Bad("returned: rollout_id is empty");
      return OkStatus();
    case ManagerRequest::kSnapshot:
    case ManagerRequest::kRestore:
    case ManagerRequest::kPing:
      return OkStatus();
    case ManagerRequest::KIND_NOT_SET:
      break;
  }
  return Bad("no request kind set");
}

Status Validate(const ManagerReply& m) {
  LAMINAR_RETURN_IF_ERROR(Validate(m.work()), "work");
  LAMINAR_RETURN_IF_ERROR(ValidateEach(m.repack(), "repack"));
  LAMINAR_RETURN_IF_ERROR(ValidateEach(m.imports(), "imports"));
  LAMINAR_RETURN_IF_ERROR(ValidateEach(m.batch().trajectories(), "batch.trajectories"));
  if (m.dropped() < 0) return Bad("dropped is negative");
  return OkStatus();
}

Status Validate(const RelayRequest& m) {
  switch (m.kind_case()) {
    case RelayRequest::kJoin:
      if (m.join().relay().id().empty() || m.join().relay().control_endpoint().empty() ||
          m.join().relay().bulk_address().empty()) {
        return Bad("join: relay id, control_endpoint and bulk_address are required");
      }
      return OkStatus();
    case RelayRequest::kPull:
      if (m.pull().version() < 0) return Bad("pull: version is negative");
      if (m.pull().bulk_address().empty()) return Bad("pull: bulk_address is empty");
      return OkStatus();
    case RelayRequest::kResend:
      if (m.resend().version() < 0) return Bad("resend: version is negative");
      if (m.resend().bulk_address().empty()) return Bad("resend: bulk_address is empty");
      return OkStatus();
    case RelayRequest::kComplete:
      if (m.complete().relay_id().empty()) return Bad("complete: relay_id is empty");
      if (m.complete().version() < 0) return Bad("complete: version is negative");
      return OkStatus();
    case RelayRequest::kLeave:
      if (m.leave().relay_id().empty()) return Bad("leave: relay_id is empty");
      return OkStatus();
    case RelayRequest::kPing:
    case RelayRequest::kLatest:
    case RelayRequest::kChain:
      return OkStatus();
    case RelayRequest::KIND_NOT_SET:
      break;
  }
  return Bad("no request kind set (unknown to this build?)");
}

Status Validate(const RelayReply& m) {
  if (m.latest_complete_version() < -1) return Bad("latest_complete_version below -1");
  return OkStatus();
}

}  // namespace laminar::proto
