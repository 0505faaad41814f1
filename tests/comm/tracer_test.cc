// The tracer: summaries, step stamping, JSONL output, formatting helpers.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "comm/tracer.h"
#include "test_util.h"

namespace weft {
namespace {

TraceEvent ev(const std::string& kind, const std::string& axis, int64_t bytes, double dur, bool async = false) {
  TraceEvent e;
  e.kind = kind;
  e.axis = axis;
  e.bytes = bytes;
  e.group = "ranks 0,1";
  e.start_s = 1.0;
  e.duration_s = dur;
  e.async = async;
  return e;
}

TEST(Tracer, SummaryPerAxisAndKind) {
  Tracer t;
  t.record(ev("all_reduce", "dp", 100, 0.5));
  t.record(ev("all_reduce", "dp", 300, 0.25, true));
  t.record(ev("reduce_scatter", "dp", 1000, 1.0));
  t.record(ev("all_gather", "tp", 64, 0.125));
  const TraceSummary s = t.summary();
  EXPECT_EQ(s.total.calls, 4);
  EXPECT_EQ(s.total.bytes, 1464);
  EXPECT_DOUBLE_EQ(s.total.time_s, 1.875);
  ASSERT_EQ(s.by_axis.size(), 2u);
  const TraceAxisSummary& dp = s.by_axis.at("dp");
  EXPECT_EQ(dp.total.calls, 3);
  EXPECT_EQ(dp.total.bytes, 1400);
  EXPECT_DOUBLE_EQ(dp.total.time_s, 1.75);
  EXPECT_EQ(dp.by_kind.at("all_reduce").calls, 2);
  EXPECT_EQ(dp.by_kind.at("all_reduce").bytes, 400);
  EXPECT_DOUBLE_EQ(dp.by_kind.at("all_reduce").time_s, 0.75);
  EXPECT_EQ(dp.by_kind.at("reduce_scatter").calls, 1);
  const TraceAxisSummary& tp = s.by_axis.at("tp");
  EXPECT_EQ(tp.total.calls, 1);
  EXPECT_EQ(tp.by_kind.at("all_gather").bytes, 64);
  const std::string text = s.format();
  EXPECT_NE(text.find("dp: 3 calls 1.4 KiB 1.750 s"), std::string::npos) << text;
  EXPECT_NE(text.find("tp: 1 calls 64 B 0.125 s (all_gather 1 calls 64 B 0.125 s)"), std::string::npos) << text;
}

TEST(Tracer, StepIsStampedAndDisabledRecordsNothing) {
  Tracer t;
  t.set_step(3);
  t.record(ev("barrier", "world", 0, 0.0));
  t.set_step(4);
  TraceEvent e = ev("barrier", "world", 0, 0.0);
  e.step = 99;
  t.record(e);
  ASSERT_EQ(t.events().size(), 2u);
  EXPECT_EQ(t.events()[0].step, 3);
  EXPECT_EQ(t.events()[1].step, 4);
  t.set_enabled(false);
  t.record(ev("barrier", "world", 0, 0.0));
  EXPECT_EQ(t.events().size(), 2u);
  t.clear();
  EXPECT_TRUE(t.events().empty());
  EXPECT_EQ(t.summary().total.calls, 0);
}

TEST(Tracer, WriteJsonlAppends) {
  test::TempDir dir("comm");
  const std::string path = dir / "trace-rank0.jsonl";
  Tracer t;
  t.set_step(2);
  t.record(ev("all_reduce", "dp", 4096, 0.5, true));
  t.write_jsonl(path);
  t.clear();
  t.set_step(3);
  t.record(ev("send", "pp", 8, 0.25));
  t.write_jsonl(path);
  std::ifstream f(path);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(f, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["kind"], "all_reduce");
  EXPECT_EQ(lines[0]["axis"], "dp");
  EXPECT_EQ(lines[0]["bytes"], 4096);
  EXPECT_EQ(lines[0]["group"], "ranks 0,1");
  EXPECT_EQ(lines[0]["step"], 2);
  EXPECT_EQ(lines[0]["async"], true);
  EXPECT_DOUBLE_EQ(lines[0]["start_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(lines[0]["duration_s"].get<double>(), 0.5);
  EXPECT_EQ(lines[1]["kind"], "send");
  EXPECT_EQ(lines[1]["step"], 3);
  EXPECT_EQ(lines[1]["async"], false);
  EXPECT_THROW(t.write_jsonl(dir / "missing-dir/x.jsonl"), std::runtime_error);
}

// Compressed calls: wire bytes, codec, codec seconds and error go to the file and come back;
// the summary counts them and names the wire bytes.
TEST(Tracer, CompressedCallsRoundTripAndShowTheirWireBytes) {
  test::TempDir dir("comm");
  const std::string path = dir / "trace-rank0.jsonl";
  Tracer t;
  TraceEvent c = ev("all_reduce", "dp", 4096, 0.5);
  c.wire_bytes = 512, c.codec = "int4", c.codec_s = 0.125, c.rel_err = 0.0625;
  t.record(c);
  t.record(ev("all_reduce", "dp", 1024, 0.25));
  t.record(ev("all_gather", "tp", 64, 0.125));
  t.write_jsonl(path);
  const std::vector<TraceEvent> back = read_trace_jsonl(path);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].wire_bytes, 512);
  EXPECT_EQ(back[0].codec, "int4");
  EXPECT_DOUBLE_EQ(back[0].codec_s, 0.125);
  EXPECT_DOUBLE_EQ(back[0].rel_err, 0.0625);
  EXPECT_EQ(back[1].wire_bytes, -1);
  EXPECT_EQ(back[1].codec, "");
  const TraceSummary s = t.summary();
  const TraceAxisSummary& dp = s.by_axis.at("dp");
  EXPECT_EQ(dp.total.bytes, 4096 + 1024);
  EXPECT_EQ(dp.total.wire_bytes, 512 + 1024);  // the uncompressed call's wire bytes are its bytes
  EXPECT_EQ(dp.total.compressed_calls, 1);
  EXPECT_EQ(s.by_axis.at("tp").total.wire_bytes, 64);
  const std::string text = s.format();
  EXPECT_NE(text.find("dp: 2 calls 5.0 KiB (wire 1.5 KiB) 0.750 s"), std::string::npos) << text;
  EXPECT_NE(text.find("tp: 1 calls 64 B 0.125 s"), std::string::npos) << text;  // nothing compressed: no wire
}

// A file written before compressed collectives (no rel_err, wire_bytes, codec, codec_s; nor
// phase): the events read as uncompressed, unmeasured training calls.
TEST(Tracer, OldTraceFilesReadWithoutTheCompressionFields) {
  test::TempDir dir("comm");
  const std::string path = dir / "trace-rank0.jsonl";
  std::ofstream(path) << R"({"kind":"all_reduce","axis":"dp","bytes":4096,"group":"ranks 0,1","start_s":1.0,)"
                      << R"("duration_s":0.5,"step":2,"async":false})" << "\n";
  const std::vector<TraceEvent> back = read_trace_jsonl(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].bytes, 4096);
  EXPECT_EQ(back[0].phase, "train");
  EXPECT_EQ(back[0].wire_bytes, -1);
  EXPECT_EQ(back[0].codec, "");
  EXPECT_DOUBLE_EQ(back[0].codec_s, 0.0);
  EXPECT_DOUBLE_EQ(back[0].rel_err, -1.0);
}

TEST(Tracer, NowIsMonotonicSecondsSinceStart) {
  const double a = Tracer::now();
  const double b = Tracer::now();
  EXPECT_GE(a, 0.0);
  EXPECT_GE(b, a);
  EXPECT_LT(a, 24 * 3600.0);
}

TEST(CommFormat, Bytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(4 << 20), "4.0 MiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.5 GiB");
}

TEST(CommFormat, Ranks) {
  EXPECT_EQ(format_ranks({0}), "0");
  EXPECT_EQ(format_ranks({0, 2}), "0,2");
  EXPECT_EQ(format_ranks({0, 1, 2, 3, 4, 5, 6, 7}), "0,1,2,3,4,5,6,7");
  std::vector<int> r(16);
  for (int i = 0; i < 16; ++i) r[static_cast<size_t>(i)] = i;
  EXPECT_EQ(format_ranks(r), "0-15");
  for (int i = 0; i < 16; ++i) r[static_cast<size_t>(i)] = 4 * i;
  EXPECT_EQ(format_ranks(r), "0,4,...,60");
  r[5] = 21;
  EXPECT_EQ(format_ranks(r), "0,4,8,12,...,60 (16 ranks)");
}

TEST(CommDType, Sizes) {
  EXPECT_EQ(comm_dtype_size(CommDType::kF32), 4u);
  EXPECT_EQ(comm_dtype_size(CommDType::kF64), 8u);
  EXPECT_EQ(comm_dtype_size(CommDType::kI32), 4u);
  EXPECT_EQ(comm_dtype_size(CommDType::kI64), 8u);
  EXPECT_EQ(comm_dtype_size(CommDType::kU8), 1u);
}

}  // namespace
}  // namespace weft
