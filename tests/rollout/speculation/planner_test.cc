// Speculation's planning: draft budgets from measured costs and acceptance, the measured gain of
// drafted steps, whether drafts could pay, and the catch-ups of cold drafter caches.
#include <gtest/gtest.h>

#include "tests/rollout/speculation/speculation_test_util.h"

namespace laminar::rollout {
namespace {

using namespace spec_test;  // NOLINT(google-build-using-namespace): the tests' own helpers

TEST(PlanDraftBudgetsTest, FromMeasuredCosts) {
  std::vector<AcceptanceStats> good(4);
  for (auto& a : good) {
    for (int i = 0; i < 20; ++i) a.Record(3, true);  // alpha near 0.75
  }
  StepCostModel not_ready;
  EXPECT_EQ(PlanDraftBudgets(good, not_ready, 4, 8, 2), (std::vector<int64_t>(4, 2)));
  // Memory-bound: a step costs the same at any size: speculate fully.
  StepCostModel flat;
  for (int t : {1, 4, 16, 40, 64, 8}) flat.Record(t, 0.01);
  EXPECT_EQ(PlanDraftBudgets(good, flat, 4, 8, 2), (std::vector<int64_t>(4, 8)));
  // Compute-bound: each token costs as much as the fixed part: never speculate.
  StepCostModel steep;
  for (int t : {1, 4, 16, 40, 64, 8}) steep.Record(t, 0.001 + 0.001 * t);
  EXPECT_EQ(PlanDraftBudgets(good, steep, 4, 8, 2), (std::vector<int64_t>(4, 0)));
  // Speculation off for a long while (the window holds one step size only): the measured slope
  // stays, so budgets stay off instead of exploring again.
  for (int i = 0; i < 400; ++i) steep.Record(4, 0.001 + 0.001 * 4);
  EXPECT_TRUE(steep.ready());
  EXPECT_NEAR(steep.per_token(), 0.001, 1e-9);
  EXPECT_EQ(PlanDraftBudgets(good, steep, 4, 8, 2), (std::vector<int64_t>(4, 0)));
  // Many steps of one size and one of another (a first drafted step at batch 16) do not make a
  // slope: that one record, a few ms off, would set it. Three do, through their median.
  StepCostModel one_off;
  for (int i = 0; i < 20; ++i) one_off.Record(16, 0.045);
  one_off.Record(20, 0.044);
  EXPECT_FALSE(one_off.ready());
  one_off.Record(20, 0.052);
  one_off.Record(20, 0.051);
  ASSERT_TRUE(one_off.ready());
  EXPECT_NEAR(one_off.per_token(), (0.051 - 0.045) / 4, 1e-9);
  // A model drafter measured at one row count only: its rows cost what a policy token does
  // (not 0, which had planned drafts for 14 of 16 sequences); once measured, its own slope.
  StepCostModel one_row = steep;
  for (int i = 0; i < 5; ++i) one_row.RecordDraft(1, 0.007);
  EXPECT_NEAR(one_row.draft_per_row(), 0.001, 1e-9);
  StepCostModel no_model = one_row;
  no_model.set_forward_per_depth(false);  // rows are drafted tokens: its own (flat) line
  EXPECT_EQ(no_model.draft_per_row(), 0.0);
  for (int rows : {5, 9, 5}) one_row.RecordDraft(rows, 0.007 + 0.0002 * (rows - 1));
  ASSERT_TRUE(one_row.draft().ready());
  EXPECT_NEAR(one_row.draft_per_row(), 0.0002, 1e-9);
  // A stalled step (0.5 s among 30-40 ms ones) does not tilt the line: medians per size.
  StepCostModel stalled;
  for (int i = 0; i < 40; ++i) stalled.Record(1, 0.03);
  for (int i = 0; i < 3; ++i) stalled.Record(5, 0.04);
  stalled.Record(5, 0.5);
  stalled.Record(1, 0.5);
  EXPECT_NEAR(stalled.per_token(), 0.0025, 1e-9);
  EXPECT_NEAR(stalled.Seconds(1), 0.03, 1e-3);
  // Flat steps, but each drafter forward costs as much as a step (a slow model drafter): none.
  StepCostModel slow_drafter = flat;
  slow_drafter.RecordDraft(4, 0.01);
  EXPECT_EQ(PlanDraftBudgets(good, slow_drafter, 4, 8, 2), (std::vector<int64_t>(4, 0)));
  // A drafter whose tokens are never accepted gets nothing even when drafting is free.
  std::vector<AcceptanceStats> hopeless(2);
  for (auto& a : hopeless) {
    for (int i = 0; i < 40; ++i) a.Record(0, true);
  }
  EXPECT_EQ(PlanDraftBudgets(hopeless, flat, 2, 8, 2), (std::vector<int64_t>(2, 0)));
  // In between: some drafts, the first ones of each sequence (alpha equal), fewer than the max.
  StepCostModel mid;
  for (int t : {1, 4, 16, 40, 64, 8}) mid.Record(t, 0.01 + 0.0005 * t);
  const auto b = PlanDraftBudgets(good, mid, 4, 8, 2);
  int64_t total = 0;
  for (int64_t x : b) total += x;
  EXPECT_GT(total, 0);
  EXPECT_LT(total, 32);
}

// The measured gain closes speculation when steps with drafts emit fewer tokens per second than
// plain steps would, and opens it again when they emit more.
TEST(SpeculationGainTest, ClosesWhenDraftedStepsAreSlowerAndReopens) {
  SpeculationGain gain;
  EXPECT_TRUE(gain.pays());  // nothing measured
  EXPECT_FALSE(gain.measured_to_pay());
  // 4 decodes, 1 token accepted in all, 70 ms against 50 ms plain: (5 / 0.07) / (4 / 0.05) < 1.
  for (int64_t i = 0; i < SpeculationGain::kMinSteps - 1; ++i) gain.Record(4, 5, 0.07, 0.05);
  EXPECT_TRUE(gain.pays());  // too few steps to tell
  EXPECT_FALSE(gain.measured_to_pay());
  gain.Record(4, 5, 0.07, 0.05);
  EXPECT_FALSE(gain.pays());
  EXPECT_FALSE(gain.measured_to_pay());
  EXPECT_NEAR(gain.ratio(), (5 / 0.07) / (4 / 0.05), 1e-9);
  // Exploration steps that pay (one decode, 4 tokens in 45 ms against 30 ms): back on.
  while (!gain.pays()) gain.Record(1, 4, 0.045, 0.03);
  EXPECT_GE(gain.ratio(), 1.0);
  EXPECT_GT(gain.steps(), SpeculationGain::kMinSteps);
  EXPECT_TRUE(gain.measured_to_pay());
  // Steps without a measured time are ignored.
  const double before = gain.ratio();
  gain.Record(0, 0, 0.01, 0.01);
  gain.Record(2, 3, 0.0, 0.01);
  EXPECT_EQ(gain.ratio(), before);
  // Near 1 it holds its state (hysteresis): a ratio of 0.99 does not switch it off.
  for (int i = 0; i < 200; ++i) gain.Record(1, 1, 1.0 / 0.99, 1.0);
  EXPECT_NEAR(gain.ratio(), 0.99, 1e-4);
  EXPECT_TRUE(gain.pays());
  // Plain steps set the level the line is scaled by: on a machine running at half the line's
  // speed, drafted steps are compared with plain steps as slow as they are.
  SpeculationGain slow;
  slow.RecordPlain(0.10, 0.05);
  EXPECT_DOUBLE_EQ(slow.level(), 2.0);
  for (int64_t i = 0; i < SpeculationGain::kMinSteps; ++i) slow.Record(4, 5, 0.10, 0.05);
  EXPECT_NEAR(slow.ratio(), 1.25, 1e-9);  // (5 / 0.1) / (4 / 0.1); the line alone says 0.625
  EXPECT_TRUE(slow.pays());
  // While drafting pays, a plain step is due every kPlainEvery drafted steps.
  EXPECT_FALSE(slow.plain_due());
  for (int64_t i = SpeculationGain::kMinSteps; i < SpeculationGain::kPlainEvery; ++i) {
    slow.Record(4, 5, 0.10, 0.05);
  }
  EXPECT_TRUE(slow.plain_due());
  slow.RecordPlain(0.05, 0.05);  // the machine sped up: the level follows, weighted to the recent
  EXPECT_FALSE(slow.plain_due());
  EXPECT_NEAR(slow.level(), 0.7 * 2.0 + 0.3 * 1.0, 1e-12);
  // One stalled first step weighs no more than the others: seven good steps outvote it.
  SpeculationGain cold;
  cold.Record(1, 1, 0.2, 0.04);                               // ratio 0.2
  for (int i = 0; i < 7; ++i) cold.Record(1, 2, 0.05, 0.04);  // ratio 1.6
  EXPECT_EQ(cold.steps(), SpeculationGain::kMinSteps);
  EXPECT_GT(cold.ratio(), 1.03);
  EXPECT_TRUE(cold.pays());
}

// What drafted steps took beyond a plain one, over what the cost model put their drafts at.
TEST(SpeculationGainTest, MeasuresWhatDraftsCostBeyondTheModel) {
  SpeculationGain gain;
  EXPECT_EQ(gain.extra_factor(), 1.0);
  gain.Record(4, 10, 0.15, 0.05, 0.05);  // no plain step measured yet: nothing to subtract
  EXPECT_EQ(gain.extra_factor(), 1.0);
  gain.RecordPlain(0.05, 0.05);
  gain.Record(4, 10, 0.15, 0.05, 0.05);  // 0.10 s beyond the plain 0.05 s, modelled 0.05 s
  EXPECT_DOUBLE_EQ(gain.extra_factor(), 2.0);
  gain.Record(4, 10, 0.08, 0.05, 0.05);  // 0.03 s: the recent step weighs most
  EXPECT_NEAR(gain.extra_factor(), (0.95 * 0.10 + 0.03) / (0.95 * 0.05 + 0.05), 1e-12);
  gain.Record(4, 10, 0.08, 0.05, 0.0);  // no model: the factor keeps
  EXPECT_NEAR(gain.extra_factor(), (0.95 * 0.10 + 0.03) / (0.95 * 0.05 + 0.05), 1e-12);
  // Bounded both ways: a step faster than plain (noise), a model far off.
  SpeculationGain low, high;
  low.RecordPlain(0.05, 0.05);
  low.Record(4, 4, 0.04, 0.05, 0.05);
  EXPECT_EQ(low.extra_factor(), SpeculationGain::kMinExtra);
  high.RecordPlain(0.05, 0.05);
  high.Record(4, 4, 1.0, 0.05, 0.01);
  EXPECT_EQ(high.extra_factor(), SpeculationGain::kMaxExtra);
}

TEST(SpeculationGainTest, MeasuresHowOftenDraftsAreAcceptedAgainstTheirHistories) {
  SpeculationGain gain;
  EXPECT_EQ(gain.acceptance_factor(), 1.0);
  gain.RecordAcceptance(8.0, 4);  // half of what the histories promised, two tokens of prior at 1
  EXPECT_DOUBLE_EQ(gain.acceptance_factor(), (4.0 + 2) / (8.0 + 2));
  gain.RecordAcceptance(0.0, 3);  // nothing expected (no tree verified): not a measurement
  EXPECT_DOUBLE_EQ(gain.acceptance_factor(), (4.0 + 2) / (8.0 + 2));
  gain.RecordAcceptance(4.0, 4);  // the recent step weighs most
  EXPECT_NEAR(gain.acceptance_factor(), (0.95 * 4 + 4 + 2) / (0.95 * 8 + 4 + 2), 1e-12);
  // Bounded: more accepted than promised plans as promised; never below kMinAcceptance.
  SpeculationGain lucky, hopeless;
  lucky.RecordAcceptance(2.0, 6);
  EXPECT_EQ(lucky.acceptance_factor(), 1.0);
  for (int i = 0; i < 50; ++i) hopeless.RecordAcceptance(4.0, 0);
  EXPECT_EQ(hopeless.acceptance_factor(), SpeculationGain::kMinAcceptance);
}

// The drafter's forwards cost a fixed part per chain depth: the planner picks the depth where the
// tokens per second peak (3 at alpha 0.7 with a forward a fifth of a step), not the deepest
// chain that still adds expected tokens; a drafter without a model pays its fixed part once.
TEST(PlanDraftBudgetsTest, ForwardCostPicksTheDepth) {
  const std::vector<AcceptanceStats> alpha(4, AcceptanceStats{.accepted = 7, .rejections = 3});
  StepCostModel cost;
  for (int t : {1, 4, 16, 40}) cost.Record(t, 0.05);  // memory-bound: flat
  for (int rows : {4, 8, 4, 8, 4, 8}) cost.RecordDraft(rows, 0.01);
  ASSERT_TRUE(cost.draft().ready());
  // (4 + 4 (0.7 + ... + 0.7^D)) / (0.05 + 0.01 D): 113, 125, 126.5, 122.7 tokens/s for D = 1..4.
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0), (std::vector<int64_t>(4, 3)));
  // Once per step: every token that adds 0.05 expected tokens (0.7^8 = 0.058).
  cost.set_forward_per_depth(false);
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0), (std::vector<int64_t>(4, 8)));
  // A line measured only at 16 and 20 tokens: a step feeds at most 40 (16 decodes, 24 drafts),
  // although drafting looks free.
  StepCostModel narrow;
  for (int t : {16, 20, 16, 20, 16, 20}) narrow.Record(t, 0.05);
  std::vector<AcceptanceStats> many(16, AcceptanceStats{.accepted = 97, .rejections = 3});
  int64_t drafted = 0;
  for (int64_t b : PlanDraftBudgets(many, narrow, 16, 8, 0)) drafted += b;
  EXPECT_EQ(drafted, 24);
  // Calibrated by what was measured: drafts that cost twice what the model says go one token
  // less deep ((4 + 4 (0.7 + 0.49)) / (0.05 + 0.04) is the best); five times: none pays; plain
  // steps at half the line's time: drafting is compared with those.
  cost.set_forward_per_depth(true);
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0, {}, {}, {.extra_factor = 2}),
            (std::vector<int64_t>(4, 2)));
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0, {}, {}, {.extra_factor = 5}),
            (std::vector<int64_t>(4, 0)));
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0, {}, {}, {.plain_level = 0.5}),
            (std::vector<int64_t>(4, 2)));
  // Drafts accepted half as often as their histories say (gains 0.35, 0.245, ...): (4 + 4 ·
  // 0.595) / 0.07 beats depth 1 and 3; a quarter as often: (4 + 0.7) / 0.06 < 4 / 0.05, none.
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0, {}, {}, {.acceptance_factor = 0.5}),
            (std::vector<int64_t>(4, 2)));
  EXPECT_EQ(PlanDraftBudgets(alpha, cost, 4, 8, 0, {}, {}, {.acceptance_factor = 0.25}),
            (std::vector<int64_t>(4, 0)));
  // Whether drafts could pay asks about nearly all accepted, whatever acceptance was measured.
  EXPECT_TRUE(DraftsCouldPay(cost, 4, 8, {}, {}, {.acceptance_factor = 0.25}));
  // A forward as dear as three steps: no depth pays.
  StepCostModel dear;
  for (int t : {1, 4, 16, 40}) dear.Record(t, 0.05);
  dear.RecordDraft(4, 0.15);
  EXPECT_EQ(PlanDraftBudgets(alpha, dear, 4, 8, 0), (std::vector<int64_t>(4, 0)));
}

// Exploration asks whether drafts could pay at all: not where a step's cost is all per token
// (compute-bound), nor where a drafter forward costs three steps; yes where steps cost the same at
// any size and drafting is cheap, and before anything is measured.
TEST(DraftsCouldPayTest, OnlyWhereAcceptanceDecides) {
  StepCostModel not_ready;
  EXPECT_TRUE(DraftsCouldPay(not_ready, 16, 8));
  StepCostModel flat;
  for (int t : {1, 4, 16, 40, 64, 8}) flat.Record(t, 0.05);
  EXPECT_TRUE(DraftsCouldPay(flat, 16, 8));
  // Every token costs the same, a drafted one too: 0.95 of a token for the price of one.
  StepCostModel steep;
  for (int t : {1, 4, 16, 40, 64, 8}) steep.Record(t, 0.002 * t);
  EXPECT_FALSE(DraftsCouldPay(steep, 16, 8));
  StepCostModel dear = flat;
  dear.RecordDraft(4, 0.15);
  EXPECT_FALSE(DraftsCouldPay(dear, 4, 8));
  // A cold sequence whose catch-up costs ten steps per draft: not for it.
  const std::vector<double> cold = {0.5};
  EXPECT_TRUE(DraftsCouldPay(flat, 1, 8));
  EXPECT_FALSE(DraftsCouldPay(flat, 1, 8, cold));
}

// A cold sequence (a model drafter that must first catch up with a prefill) pays that cost once,
// shared by its whole chain: left out when it does not pay, a whole chain when it does, and the
// warm sequences keep their budgets either way.
TEST(PlanDraftBudgetsTest, ColdSequencesShareTheirCatchUpOverTheChain) {
  std::vector<AcceptanceStats> good(2);
  for (auto& a : good) {
    for (int i = 0; i < 40; ++i) a.Record(9, false);  // alpha near 0.97
  }
  StepCostModel cost;
  for (int t : {1, 2, 4, 8, 16, 2}) cost.Record(t, 0.03 + 0.001 * t);
  cost.RecordDraft(2, 0.005);
  const auto warm = PlanDraftBudgets(good, cost, 2, 8, 0);
  ASSERT_GT(warm[0], 0);
  // Sequence 1's catch-up costs 10 steps: no chain repays it; sequence 0 is unaffected.
  const std::vector<double> huge = {0.0, 0.3};
  const auto b = PlanDraftBudgets(good, cost, 2, 8, 0, huge);
  EXPECT_EQ(b[0], warm[0]);
  EXPECT_EQ(b[1], 0);
  // A small catch-up (a third of a step): one draft token alone would not repay it (alpha 0.97
  // for 0.011 s more), a chain does.
  const std::vector<double> small = {0.0, 0.01};
  const auto c = PlanDraftBudgets(good, cost, 2, 8, 0, small);
  EXPECT_EQ(c[0], warm[0]);
  EXPECT_GT(c[1], 1);
  // A drafter's catch-up cost per token is measured apart from its drafting; before any is
  // seen it is taken to be a one-row drafter forward's.
  StepCostModel fresh;
  fresh.RecordDraft(2, 0.02);
  EXPECT_DOUBLE_EQ(fresh.catch_up_per_token(), 0.02);
  fresh.RecordCatchUp(100, 0.2);
  EXPECT_DOUBLE_EQ(fresh.catch_up_per_token(), 0.002);
}

// Cold sequences of a GRPO group share their prompt's prefill: once drafting has paid at the
// batch size, each is charged its own tokens and an equal share of the prompt (all four of a
// group catching up feed the prompt once and their responses); before, only the one least behind
// may catch up, and it pays its whole catch-up. Warm sequences are what they are either way.
TEST(PlanCatchUpsTest, GroupsShareTheirPromptAndUnprovenBatchesTryOneColdSequence) {
  constexpr int64_t kWarm = 9;
  // Group 7: a 96-token prompt and 10 generated tokens each, nothing fed. Group 8: one sample 3
  // behind (warm) and one that lacks 40 of its 60 generated tokens (its prompt is held).
  const std::vector<CatchUpNeed> need = {
      {.behind = 106, .group = 7, .generated = 10}, {.behind = 106, .group = 7, .generated = 10},
      {.behind = 106, .group = 7, .generated = 10}, {.behind = 106, .group = 7, .generated = 10},
      {.behind = 3, .group = 8, .generated = 20},   {.behind = 40, .group = 8, .generated = 60}};
  EXPECT_EQ(PlanCatchUps(need, kWarm, /*proven=*/true),
            (std::vector<int64_t>{34, 34, 34, 34, 3, 40}));
  EXPECT_EQ(PlanCatchUps(need, kWarm, /*proven=*/false),
            (std::vector<int64_t>{kCatchUpNotThisStep, kCatchUpNotThisStep, kCatchUpNotThisStep,
                                  kCatchUpNotThisStep, 3, 40}));
  // A lone cold sequence (the long tail) always may, with its whole catch-up.
  const std::vector<CatchUpNeed> tail = {{.behind = 300, .group = 1, .generated = 200}};
  EXPECT_EQ(PlanCatchUps(tail, kWarm, false), (std::vector<int64_t>{300}));
  EXPECT_EQ(PlanCatchUps(tail, kWarm, true), (std::vector<int64_t>{300}));
  // The first of equals; a shared prompt rounded up (16 prompt tokens over 3: 6 each).
  const std::vector<CatchUpNeed> three = {{.behind = 21, .group = 2, .generated = 5},
                                          {.behind = 21, .group = 2, .generated = 5},
                                          {.behind = 21, .group = 2, .generated = 5}};
  EXPECT_EQ(PlanCatchUps(three, kWarm, false),
            (std::vector<int64_t>{21, kCatchUpNotThisStep, kCatchUpNotThisStep}));
  EXPECT_EQ(PlanCatchUps(three, kWarm, true), (std::vector<int64_t>{11, 11, 11}));
  // Members lacking different shares of one prompt (the most lacking counts), a member that
  // lacks only its own tokens (not counted among the sharers), and warm exactly at the bound.
  // A share that would come out at or below warm stays a cold prefill (warm + 1).
  const std::vector<CatchUpNeed> mixed = {
      {.behind = 50, .group = 3, .generated = 10}, {.behind = 30, .group = 3, .generated = 10},
      {.behind = 12, .group = 3, .generated = 40}, {.behind = kWarm, .group = 3, .generated = 40},
      {.behind = 14, .group = 4, .generated = 2},  {.behind = 14, .group = 4, .generated = 2},
      {.behind = 14, .group = 4, .generated = 2},  {.behind = 14, .group = 4, .generated = 2}};
  EXPECT_EQ(PlanCatchUps(mixed, kWarm, true),
            (std::vector<int64_t>{30, 30, 12, kWarm, kWarm + 1, kWarm + 1, kWarm + 1, kWarm + 1}));
  EXPECT_TRUE(PlanCatchUps({}, kWarm, false).empty());
}

}  // namespace
}  // namespace laminar::rollout
