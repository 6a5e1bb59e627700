// The manager's ledger from outside the run; see manager_ledger.h.
#include "launch/manager_ledger.h"

#include "core/zmq_transport.h"
#include "proto/codec.h"
#include "proto/control.pb.h"

namespace laminar::launch {

std::string ManagerEndpointInRunLog(std::string_view run_log) {
  constexpr std::string_view kMarker = " rollouts, manager ";
  const size_t at = run_log.rfind(kMarker);
  if (at == std::string_view::npos) return "";
  const size_t begin = at + kMarker.size();
  const size_t end = run_log.find(',', begin);
  if (end == std::string_view::npos) return "";
  return std::string(run_log.substr(begin, end - begin));
}

StatusOr<nlohmann::json> AskManagerLedger(const std::string& endpoint, const std::string& sender,
                                          int timeout_ms) {
  ZmqRequestClient manager(endpoint);
  proto::ManagerRequest req;
  req.mutable_header()->set_sender(sender);
  req.mutable_snapshot();
  LAMINAR_ASSIGN_OR_RETURN(std::string bytes, manager.Call(proto::Encode(req), timeout_ms));
  LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply,
                           proto::Decode<proto::ManagerReply>(bytes, "manager"));
  nlohmann::json ledger = nlohmann::json::parse(reply.snapshot_json(), nullptr, false);
  if (!ledger.is_object()) {
    return DataLossError("the manager at " + endpoint + " sent a snapshot that is not JSON");
  }
  return ledger;
}

}  // namespace laminar::launch
