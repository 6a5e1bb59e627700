// Every message type round-trips; malformed bytes, another protocol version and broken invariants
// are refused with errors naming the peer and the message type.
#include "proto/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace laminar::proto {
namespace {

Trajectory SampleTrajectory() {
  Trajectory t;
  t.mutable_header()->set_sender("rollout/3");
  t.set_prompt_id("gsm8k-17");
  t.set_sample_index(5);
  for (int id : {1, 2, 3}) t.add_prompt_ids(id);
  for (int id : {7, 8}) t.add_response_ids(id);
  t.add_logprobs(-0.5f);
  t.add_logprobs(-1.25f);
  t.set_version(4);
  t.set_finish_reason(FINISH_REASON_STOP);
  t.set_reward(1.0f);
  t.mutable_timings()->set_generate_s(0.25);
  t.set_rollout_id("rollout/3");
  return t;
}

WeightManifest SampleManifest() {
  WeightManifest m;
  m.set_version(9);
  auto* t = m.add_tensors();
  t->set_name("model.norm.weight");
  t->set_dtype("f32");
  t->add_shape(4);
  t->set_offset(0);
  t->set_size_bytes(16);
  m.set_total_bytes(16);
  m.set_chunk_bytes(10);
  m.set_num_chunks(2);
  m.add_chunk_xxhash64(1);
  m.add_chunk_xxhash64(2);
  return m;
}

template <typename M>
M RoundTrip(const M& m) {
  auto back = Decode<M>(Encode(m), "peer");
  EXPECT_TRUE(back.ok()) << back.status();
  return back.ok() ? *back : M();
}

TEST(CodecTest, EveryMessageRoundTrips) {
  Trajectory t = SampleTrajectory();
  Trajectory t2 = RoundTrip(t);
  EXPECT_EQ(t2.response_ids_size(), 2);
  EXPECT_EQ(t2.logprobs(1), -1.25f);
  EXPECT_EQ(t2.header().protocol_version(), kProtocolVersion);
  EXPECT_EQ(t2.header().sender(), "rollout/3");

  PromptGroup g;
  g.set_prompt_id("p");
  g.add_prompt_ids(3);
  g.set_num_samples(8);
  g.mutable_sampling()->set_temperature(1.0f);
  g.mutable_sampling()->add_stop("</answer>");
  EXPECT_EQ(RoundTrip(g).sampling().stop(0), "</answer>");

  PartialResponse p;
  p.set_prompt_id("p");
  p.add_response_ids(1);
  p.add_logprobs(-0.1f);
  EXPECT_EQ(RoundTrip(p).response_ids(0), 1);

  EXPECT_EQ(RoundTrip(SampleManifest()).tensors(0).name(), "model.norm.weight");

  WeightChunk c;
  c.set_version(9);
  c.set_index(1);
  c.set_data("abcdef");
  c.set_xxhash64(Checksum("abcdef"));
  EXPECT_EQ(RoundTrip(c).data(), "abcdef");

  Heartbeat h;
  h.set_id("rollout/1");
  h.set_kv_blocks_used(3);
  h.set_kv_blocks_capacity(10);
  EXPECT_EQ(RoundTrip(h).kv_blocks_capacity(), 10);

  Stats st;
  st.set_id("rollout/1");
  st.set_interval_s(2.5);
  (*st.mutable_values())["relay/pull_wait_s"] = 0.25;
  EXPECT_EQ(RoundTrip(st).values().at("relay/pull_wait_s"), 0.25);
  (*st.mutable_values())["bad"] = std::nan("");
  EXPECT_NE(Decode<Stats>(Encode(st), "rollout/1").status().message().find("'bad'"),
            std::string::npos);

  WorkRequest w;
  w.set_rollout_id("rollout/1");
  w.set_max_groups(2);
  EXPECT_EQ(RoundTrip(w).max_groups(), 2);

  WorkReply r;
  *r.add_groups() = g;
  EXPECT_EQ(RoundTrip(r).groups_size(), 1);

  RepackCommand rc;
  rc.set_source("rollout/1");
  rc.set_destination("rollout/2");
  rc.add_request_ids("p#3");
  EXPECT_EQ(RoundTrip(rc).request_ids(0), "p#3");

  EXPECT_TRUE(Decode<VersionQuery>(Encode(VersionQuery()), "peer").ok());
  VersionReply vr;
  vr.set_latest_complete_version(12);
  EXPECT_EQ(RoundTrip(vr).latest_complete_version(), 12);
}

TEST(CodecTest, RelayMessagesRoundTripAndAreChecked) {
  RelayBroadcast b;
  SetBroadcastManifest(SampleManifest(), &b);
  b.add_route("ucx://127.0.0.1:1");
  b.set_epoch(3);
  EXPECT_EQ(RoundTrip(b).route(0), "ucx://127.0.0.1:1");
  EXPECT_EQ(BroadcastManifest(b)->tensors(0).name(), "model.norm.weight");
  RelayBroadcast flipped = b;
  flipped.mutable_manifest()->back() ^= 1;  // a flipped bit that still parses
  EXPECT_EQ(Decode<RelayBroadcast>(Encode(flipped), "relay/1").status().code(),
            StatusCode::kDataLoss);
  b.add_route("");
  EXPECT_NE(Decode<RelayBroadcast>(Encode(b), "relay/1").status().message().find("route[1]"),
            std::string::npos);
  EXPECT_FALSE(Decode<RelayBroadcast>(Encode(RelayBroadcast()), "relay/1").ok());

  RelayRequest join;
  join.mutable_join()->mutable_relay()->set_id("r1");
  join.mutable_join()->mutable_relay()->set_control_endpoint("tcp://127.0.0.1:2");
  join.mutable_join()->mutable_relay()->set_bulk_address("ucx://127.0.0.1:3");
  EXPECT_EQ(RoundTrip(join).join().relay().id(), "r1");
  RelayRequest pull;
  pull.mutable_pull()->set_version(4);
  EXPECT_FALSE(Decode<RelayRequest>(Encode(pull), "rollout/0").ok());  // no bulk address
  pull.mutable_pull()->set_bulk_address("tcp://127.0.0.1:9");
  EXPECT_EQ(RoundTrip(pull).pull().version(), 4);
  auto unset = Decode<RelayRequest>(Encode(RelayRequest()), "rollout/0");
  EXPECT_NE(unset.status().message().find("no request kind"), std::string::npos);

  RelayReply reply;
  reply.set_latest_complete_version(7);
  reply.add_completions()->set_relay_id("r2");
  EXPECT_EQ(RoundTrip(reply).completions(0).relay_id(), "r2");
  reply.set_latest_complete_version(-2);
  EXPECT_FALSE(Decode<RelayReply>(Encode(reply), "relay/0").ok());
}

TEST(CodecTest, MalformedBytesNameThePeer) {
  auto r = Decode<Trajectory>(std::string("\xff\xff\xff\xff\x0f", 5), "rollout/7");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("laminar.proto.Trajectory from rollout/7"), std::string::npos)
      << r.status();
}

TEST(CodecTest, OtherProtocolVersionIsRefused) {
  Trajectory t = SampleTrajectory();
  t.mutable_header()->set_protocol_version(kProtocolVersion + 1);
  auto r = Decode<Trajectory>(t.SerializeAsString(), "rollout/1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("protocol version 2"), std::string::npos) << r.status();
  // An empty message carries no header at all: version 0.
  EXPECT_FALSE(Decode<Heartbeat>("", "x").ok());
}

TEST(CodecTest, InvariantsAreChecked) {
  Trajectory t = SampleTrajectory();
  t.add_response_ids(9);  // one more token than logprobs
  auto r = Decode<Trajectory>(Encode(t), "rollout/2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("3 tokens but logprobs has 2"), std::string::npos)
      << r.status();
  t = SampleTrajectory();
  t.set_logprobs(0, NAN);
  EXPECT_FALSE(Decode<Trajectory>(Encode(t), "p").ok());
  t = SampleTrajectory();
  t.set_finish_reason(FINISH_REASON_UNSPECIFIED);
  EXPECT_FALSE(Decode<Trajectory>(Encode(t), "p").ok());

  WeightManifest m = SampleManifest();
  m.set_num_chunks(3);
  EXPECT_NE(Decode<WeightManifest>(Encode(m), "relay/0").status().message().find("need 2"),
            std::string::npos);
  m = SampleManifest();
  m.mutable_tensors(0)->set_size_bytes(12);
  EXPECT_FALSE(Decode<WeightManifest>(Encode(m), "relay/0").ok());
  // A total that overflows the chunk count, and one beyond any model, are both refused.
  WeightManifest huge;
  huge.set_total_bytes(~uint64_t{0});
  huge.set_chunk_bytes(2);
  EXPECT_NE(Decode<WeightManifest>(Encode(huge), "relay/0").status().message().find("limit"),
            std::string::npos);
  m = SampleManifest();
  m.mutable_tensors(0)->set_offset(8);
  EXPECT_FALSE(Decode<WeightManifest>(Encode(m), "relay/0").ok());

  WeightChunk c;
  c.set_data("abcdef");
  c.set_xxhash64(Checksum("abcdeX"));
  auto cr = Decode<WeightChunk>(Encode(c), "relay/1");
  ASSERT_FALSE(cr.ok());
  EXPECT_EQ(cr.status().code(), StatusCode::kDataLoss);

  Heartbeat h;
  h.set_id("r");
  h.set_kv_blocks_used(11);
  h.set_kv_blocks_capacity(10);
  EXPECT_FALSE(Decode<Heartbeat>(Encode(h), "r").ok());
  RepackCommand rc;
  rc.set_source("a");
  rc.set_destination("a");
  EXPECT_FALSE(Decode<RepackCommand>(Encode(rc), "manager").ok());
  PromptGroup g;
  g.set_prompt_id("p");
  g.add_prompt_ids(1);
  g.set_num_samples(0);
  EXPECT_FALSE(Decode<PromptGroup>(Encode(g), "manager").ok());
  PartialResponse p;
  p.set_prompt_id("p");
  p.set_offset(-1);
  auto pr = Decode<PartialResponse>(Encode(p), "rollout/0");
  ASSERT_FALSE(pr.ok());
  EXPECT_NE(pr.status().message().find("offset is negative"), std::string::npos) << pr.status();
}

TEST(CodecTest, RandomBytesNeverCrash) {
  std::mt19937 rng(1);
  for (int i = 0; i < 3000; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (auto& b : bytes) b = static_cast<char>(rng());
    (void)Decode<Trajectory>(bytes, "fuzz").ok();
    (void)Decode<WeightManifest>(bytes, "fuzz").ok();
    (void)Decode<WorkReply>(bytes, "fuzz").ok();
  }
}

}  // namespace
}  // namespace laminar::proto
