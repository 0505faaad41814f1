// The communication report's accounting of compressed collectives (comm_report.json version 3),
// from hand-made traces: raw and wire bytes per row, per (op, axis), per step and in all; the
// ratio; codec names and seconds; the payloads' relative RMS error (mean and max over the
// members that measured one); the bus bandwidth and the link-level crossings from the wire
// bytes; and the comparison with the analytic model on raw bytes only. Every expected value
// is worked out by hand in the comments from the events below.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "comm/topology.h"
#include "comm/tracer.h"
#include "core/error.h"
#include "plan/comm_model.h"
#include "train/comm_report.h"
#include "train/config.h"
#include "train/engine_config.h"

namespace weft {
namespace {

using nlohmann::json;

TraceEvent event(const char* kind, const char* axis, int64_t bytes, const std::string& group, int64_t step,
                 const char* phase = "train") {
  TraceEvent e;
  e.kind = kind, e.axis = axis, e.bytes = bytes, e.group = group, e.duration_s = 0.01;
  e.step = step, e.phase = phase;
  return e;
}

TraceEvent compressed(TraceEvent e, const char* codec, int64_t wire, double codec_s, double rel_err = -1.0) {
  e.codec = codec, e.wire_bytes = wire, e.codec_s = codec_s, e.rel_err = rel_err;
  return e;
}

// 4 ranks on 2 emulated nodes of 2, steps 1 and 2:
//   step 1  dp all_reduce of 4000 B on ranks 0-3, int4, 500 B on the wire on every rank, codec
//           seconds 0.001..0.004 and rel_err 0.1..0.4 by rank;
//           tp all_gathers of 800 B on {0,1} and {2,3}, not compressed;
//           pp send 1 -> 2 of 64 B as bf16 (32 B, rel_err 0.01 measured by the sender), and its recv;
//           a metrics all_reduce, compressed (not a training step: outside the compression section)
//   step 2  the dp all_reduce again, codec seconds 0.002 each, rel_err 0.5 on rank 0 only;
//           a dp all_gather of 2000 B as zstd, 1000, 1200, 1400, 1600 B by rank (mean 1300),
//           lossless: no error measured
std::vector<std::vector<TraceEvent>> compressed_trace() {
  std::vector<std::vector<TraceEvent>> per_rank(4);
  for (int r = 0; r < 4; ++r) {
    auto& t = per_rank[static_cast<size_t>(r)];
    t.push_back(compressed(event("all_reduce", "dp", 4000, "ranks 0-3", 1), "int4", 500, 0.001 * (r + 1), 0.1 * (r + 1)));
    t.push_back(event("all_gather", "tp", 800, r < 2 ? "ranks 0,1" : "ranks 2,3", 1));
    if (r == 1) t.push_back(compressed(event("send", "pp", 64, "peer 2", 1), "bf16", 32, 0.0005, 0.01));
    if (r == 2) t.push_back(compressed(event("recv", "pp", 64, "peer 1", 1), "bf16", 32, 0.0005));
    t.push_back(compressed(event("all_reduce", "world", 8, "ranks 0-3", 1, "metrics"), "int4", 4, 0.1, 0.9));
    t.push_back(compressed(event("all_reduce", "dp", 4000, "ranks 0-3", 2), "int4", 500, 0.002, r == 0 ? 0.5 : -1.0));
    t.push_back(compressed(event("all_gather", "dp", 2000, "ranks 0-3", 2), "zstd", 1000 + 200 * r, 0.003));
  }
  return per_rank;
}

CommReportInputs four_ranks_two_nodes() {
  CommReportInputs in;
  in.ec.layout.dp = 4;
  in.nodes = emulated_node_map(4, 2);
  in.first_step = 0, in.last_step = 2;  // no contexts: the model is not asked
  return in;
}

const json& row_of(const json& rep, const std::string& op, const std::string& axis) {
  for (const json& r : rep["rows"]) {
    if (r["op"] == op && r["axis"] == axis) return r;
  }
  throw std::runtime_error("no row " + op + " " + axis);
}

const json& entry_of(const json& comp, const std::string& op, const std::string& axis) {
  for (const json& e : comp["by_op_axis"]) {
    if (e["op"] == op && e["axis"] == axis) return e;
  }
  throw std::runtime_error("no compression entry " + op + " " + axis);
}

TEST(CommReportCompression, RowsCarryRawAndWireBytesCodecsAndErrors) {
  const json rep = build_comm_report(compressed_trace(), four_ranks_two_nodes());
  EXPECT_EQ(rep["version"], 3);
  // dp all_reduce: 2 calls of 4000 B raw, 500 B wire; codec seconds per call the largest
  // member's: 0.004 + 0.002; errors: 0.1 0.2 0.3 0.4 (step 1) and 0.5 (step 2): mean 0.3, max 0.5.
  const json& ar = row_of(rep, "all_reduce", "dp");
  EXPECT_EQ(ar["count"], 2);
  EXPECT_EQ(ar["total_bytes"], 8000);
  EXPECT_EQ(ar["wire_total_bytes"], 1000);
  EXPECT_DOUBLE_EQ(ar["ratio"].get<double>(), 1000.0 / 8000.0);
  EXPECT_EQ(ar["compressed_calls"], 2);
  EXPECT_EQ(ar["codecs"], json({"int4"}));
  EXPECT_NEAR(ar["codec_s"].get<double>(), 0.006, 1e-12);
  EXPECT_EQ(ar["rel_err"]["measured"], 5);
  EXPECT_NEAR(ar["rel_err"]["mean"].get<double>(), 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(ar["rel_err"]["max"].get<double>(), 0.5);
  // Bandwidths over time_s = 2 x 0.01 s: algbw from the raw bytes, busbw from the wire bytes
  // with the all-reduce factor 2(n-1)/n = 1.5.
  EXPECT_DOUBLE_EQ(ar["algbw_gbps"].get<double>(), 8000 / 0.02 / 1e9);
  EXPECT_DOUBLE_EQ(ar["wire_algbw_gbps"].get<double>(), 1000 / 0.02 / 1e9);
  EXPECT_DOUBLE_EQ(ar["busbw_gbps"].get<double>(), 1000 / 0.02 / 1e9 * 1.5);
  // zstd: the members' wire bytes differ; the call's is their mean, 1300 B.
  const json& ag = row_of(rep, "all_gather", "dp");
  EXPECT_EQ(ag["wire_total_bytes"], 1300);
  EXPECT_EQ(ag["codecs"], json({"zstd"}));
  EXPECT_EQ(ag["rel_err"], json({{"measured", 0}, {"mean", -1.0}, {"max", -1.0}}));
  // Not compressed: wire = raw, ratio 1, no codec, and busbw = algbw x (n-1)/n as before.
  const json& tp = row_of(rep, "all_gather", "tp");
  EXPECT_EQ(tp["total_bytes"], 1600);
  EXPECT_EQ(tp["wire_total_bytes"], 1600);
  EXPECT_DOUBLE_EQ(tp["ratio"].get<double>(), 1.0);
  EXPECT_EQ(tp["compressed_calls"], 0);
  EXPECT_EQ(tp["codecs"], json::array());
  EXPECT_DOUBLE_EQ(tp["codec_s"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(tp["busbw_gbps"].get<double>(), tp["algbw_gbps"].get<double>() * 0.5);
  // A transfer: the sender measured its error, the receiver did not.
  EXPECT_EQ(row_of(rep, "send", "pp")["wire_total_bytes"], 32);
  EXPECT_EQ(row_of(rep, "send", "pp")["rel_err"]["measured"], 1);
  EXPECT_EQ(row_of(rep, "recv", "pp")["rel_err"]["measured"], 0);
  // The other phases' rows carry the same fields.
  ASSERT_EQ(rep["other_phases"].size(), 1u);
  EXPECT_EQ(rep["other_phases"][0]["wire_total_bytes"], 4);
  // by_axis_level: dp (inter-node) 8000 + 2000 raw, 1000 + 1300 wire; tp (intra-node) 1600 both;
  // pp: the send and the recv, 64 raw and 32 wire each.
  for (const json& a : rep["by_axis_level"]) {
    const std::pair<int64_t, int64_t> expected = a["axis"] == "dp" ? std::pair<int64_t, int64_t>{10000, 2300}
                                                 : a["axis"] == "tp" ? std::pair<int64_t, int64_t>{1600, 1600}
                                                                     : std::pair<int64_t, int64_t>{128, 64};  // pp: send and recv
    EXPECT_EQ(a["bytes"], expected.first) << a.dump();
    EXPECT_EQ(a["wire_bytes"], expected.second) << a.dump();
  }
}

TEST(CommReportCompression, SectionSumsPerOpAxisPerStepAndInAll) {
  const json comp = build_comm_report(compressed_trace(), four_ranks_two_nodes())["compression"];
  ASSERT_EQ(comp["by_op_axis"].size(), 5u) << comp.dump(1);  // all_gather dp/tp, all_reduce dp, recv pp, send pp
  const json& ar = entry_of(comp, "all_reduce", "dp");
  EXPECT_EQ(ar["calls"], 2);
  EXPECT_EQ(ar["raw_bytes"], 8000);
  EXPECT_EQ(ar["wire_bytes"], 1000);
  EXPECT_DOUBLE_EQ(ar["ratio"].get<double>(), 0.125);
  EXPECT_EQ(ar["rel_err"]["measured"], 5);
  EXPECT_DOUBLE_EQ(ar["rel_err"]["max"].get<double>(), 0.5);
  // Its steps: every step of the range; step 1: 0.004 s and errors 0.1..0.4 (mean 0.25, max 0.4).
  ASSERT_EQ(ar["steps"].size(), 2u);
  const json& ar1 = ar["steps"][0];
  EXPECT_EQ(ar1["step"], 1);
  EXPECT_EQ(ar1["raw_bytes"], 4000);
  EXPECT_EQ(ar1["wire_bytes"], 500);
  EXPECT_NEAR(ar1["codec_s"].get<double>(), 0.004, 1e-12);
  EXPECT_NEAR(ar1["rel_err"]["mean"].get<double>(), 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(ar1["rel_err"]["max"].get<double>(), 0.4);
  // The zstd all_gather ran only in step 2: step 1 is listed with zeros.
  const json& ag = entry_of(comp, "all_gather", "dp");
  EXPECT_EQ(ag["steps"][0]["calls"], 0);
  EXPECT_DOUBLE_EQ(ag["steps"][0]["ratio"].get<double>(), 1.0);  // nothing sent
  EXPECT_EQ(ag["steps"][1]["wire_bytes"], 1300);
  // Per step over every (op, axis): step 1 raw 4000 + 1600 + 64 + 64, wire 500 + 1600 + 32 + 32;
  // step 2 raw 4000 + 2000, wire 500 + 1300.
  ASSERT_EQ(comp["steps"].size(), 2u);
  EXPECT_EQ(comp["steps"][0]["raw_bytes"], 5728);
  EXPECT_EQ(comp["steps"][0]["wire_bytes"], 2164);
  EXPECT_EQ(comp["steps"][0]["codecs"], json({"bf16", "int4"}));
  EXPECT_EQ(comp["steps"][1]["raw_bytes"], 6000);
  EXPECT_EQ(comp["steps"][1]["wire_bytes"], 1800);
  // In all (the metrics all_reduce left out): 7 calls, 5 compressed; codec seconds 0.004 +
  // 0.002 + 0.003 + 0.0005 x 2; errors 0.1..0.5 and 0.01.
  const json& total = comp["total"];
  EXPECT_EQ(total["calls"], 7);
  EXPECT_EQ(total["compressed_calls"], 5);
  EXPECT_EQ(total["raw_bytes"], 11728);
  EXPECT_EQ(total["wire_bytes"], 3964);
  EXPECT_DOUBLE_EQ(total["ratio"].get<double>(), 3964.0 / 11728.0);
  EXPECT_EQ(total["codecs"], json({"bf16", "int4", "zstd"}));
  EXPECT_NEAR(total["codec_s"].get<double>(), 0.010, 1e-12);
  EXPECT_EQ(total["rel_err"]["measured"], 6);
  EXPECT_NEAR(total["rel_err"]["mean"].get<double>(), (0.1 + 0.2 + 0.3 + 0.4 + 0.5 + 0.01) / 6, 1e-12);
  EXPECT_DOUBLE_EQ(total["rel_err"]["max"].get<double>(), 0.5);
}

// Crossings of the one level "node" (nodes {0,1}, {2,3}; crossing_bytes' closed forms):
//   all_reduce 0-3: 2 x bytes x (2 - 1): raw 8000, wire 1000, per call
//   all_gather 0-3: bytes x (2 - 1): raw 2000, wire 1300
//   all_gathers {0,1}, {2,3}: 0;  send 1 -> 2: raw 64, wire 32
TEST(CommReportCompression, LevelsCrossWithWireAndRawBytes) {
  const json rep = build_comm_report(compressed_trace(), four_ranks_two_nodes());
  const json& lv = rep["levels"];
  ASSERT_EQ(lv["steps"].size(), 2u);
  EXPECT_EQ(lv["steps"][0]["bytes"], json({{"node", 8064}}));
  EXPECT_EQ(lv["steps"][0]["wire_bytes"], json({{"node", 1032}}));
  EXPECT_EQ(lv["steps"][1]["bytes"], json({{"node", 10000}}));
  EXPECT_EQ(lv["steps"][1]["wire_bytes"], json({{"node", 2300}}));
  EXPECT_EQ(lv["steps"][1]["wire_by_axis"]["dp"], json({{"node", 2300}}));
  EXPECT_EQ(lv["total"]["bytes"], json({{"node", 18064}}));
  EXPECT_EQ(lv["total"]["wire_bytes"], json({{"node", 3332}}));
  EXPECT_EQ(lv["total"]["by_axis"]["dp"], json({{"node", 18000}}));
  EXPECT_EQ(lv["total"]["wire_by_axis"]["dp"], json({{"node", 3300}}));
  EXPECT_EQ(lv["total"]["wire_by_axis"]["pp"], json({{"node", 32}}));
  EXPECT_EQ(lv["total"]["wire_by_axis"]["tp"], json({{"node", 0}}));

  const std::string txt = format_comm_report(rep);
  EXPECT_NE(txt.find("wire bytes crossing link levels"), std::string::npos) << txt;
  EXPECT_NE(txt.find("compression of the training steps"), std::string::npos) << txt;
  EXPECT_NE(txt.find("int4"), std::string::npos) << txt;
}

TEST(CommReportCompression, UncompressedTraceHasWireEqualRawAndNoCompressionText) {
  std::vector<std::vector<TraceEvent>> per_rank(2);
  for (int r = 0; r < 2; ++r) per_rank[static_cast<size_t>(r)].push_back(event("all_reduce", "dp", 1024, "ranks 0,1", 1));
  CommReportInputs in;
  in.ec.layout.dp = 2;
  in.nodes = emulated_node_map(2, 1);
  in.first_step = 0, in.last_step = 1;
  const json rep = build_comm_report(per_rank, in);
  const json& total = rep["compression"]["total"];
  EXPECT_EQ(total["raw_bytes"], 1024);
  EXPECT_EQ(total["wire_bytes"], 1024);
  EXPECT_EQ(total["compressed_calls"], 0);
  EXPECT_EQ(rep["levels"]["total"]["wire_bytes"], rep["levels"]["total"]["bytes"]);
  const std::string txt = format_comm_report(rep);
  EXPECT_EQ(txt.find("compression"), std::string::npos) << txt;
  EXPECT_EQ(txt.find("wire"), std::string::npos) << txt;
}

TEST(CommReportCompression, MembersDisagreeingOnTheCodecAreAnError) {
  std::vector<std::vector<TraceEvent>> per_rank = {
      {compressed(event("all_reduce", "dp", 1024, "ranks 0,1", 1), "int4", 128, 0.001)},
      {event("all_reduce", "dp", 1024, "ranks 0,1", 1)}};
  CommReportInputs in;
  in.ec.layout.dp = 2;
  in.nodes = emulated_node_map(2, 1);
  in.first_step = 0, in.last_step = 1;
  try {
    build_comm_report(per_rank, in);
    ADD_FAILURE() << "a call compressed on one member only was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("codec 'int4'"), std::string::npos) << e.what();
  }
}

// The model predicts logical calls: a trace of exactly the model's calls (every member of every
// group), with every dp call compressed to a quarter on the wire, has no mismatch, and its
// rows' total bytes are the model's. A trace that put the wire bytes in `bytes` would differ.
TEST(CommReportCompression, MismatchesCompareRawBytesOnly) {
  RunConfig cfg;
  cfg.dp = 2;
  cfg.global_batch = 8;
  cfg.micro_batch = 4;
  CommReportInputs in;
  in.ec = engine_config(cfg, 2);
  in.nodes = emulated_node_map(2, 1);
  in.first_step = 0, in.last_step = 1;
  in.contexts = {CommStepContext{}};
  auto trace = [&](bool wire_in_bytes) {
    std::vector<std::vector<TraceEvent>> per_rank(2);
    for (const CommCall& c : model_step_comm(in.ec, in.contexts[0])) {
      const bool p2p = c.op == "send" || c.op == "recv";
      const std::vector<int> members = p2p ? std::vector<int>{c.ranks[0]} : c.ranks;
      const std::string group = p2p ? fmt::format("peer {}", c.ranks[1]) : "ranks " + format_ranks(c.ranks);
      for (int64_t k = 0; k < c.count; ++k) {
        for (const int r : members) {
          TraceEvent e = event(c.op.c_str(), c.axis.c_str(), c.bytes, group, 1);
          if (c.axis == "dp") e = compressed(e, "int4", c.bytes / 4, 0.001, 0.05);
          if (wire_in_bytes && c.axis == "dp") e.bytes = e.wire_bytes;
          per_rank[static_cast<size_t>(r)].push_back(e);
        }
      }
    }
    return per_rank;
  };
  const json rep = build_comm_report(trace(false), in);
  EXPECT_EQ(rep["mismatches"], 0) << format_comm_report(rep);
  int64_t dp_rows = 0;
  for (const json& r : rep["rows"]) {
    EXPECT_EQ(r["total_bytes"], r["model_total_bytes"]) << r.dump();
    if (r["axis"] != "dp") continue;
    ++dp_rows;
    EXPECT_EQ(r["wire_total_bytes"].get<int64_t>(), r["count"].get<int64_t>() * (r["bytes"].get<int64_t>() / 4)) << r.dump();
    EXPECT_EQ(r["compressed_calls"], r["count"]) << r.dump();
  }
  EXPECT_GT(dp_rows, 0) << "the layout has data-parallel calls: " << rep.dump(1);
  EXPECT_GT(build_comm_report(trace(true), in)["mismatches"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace weft
