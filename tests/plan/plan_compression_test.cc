// Compressed collectives in the planner (plan/compression.h, predict.cc, search.cc): the wire
// bytes of every kind of traffic scale by the codec's ratio, "off" reproduces the uncompressed
// prediction exactly, the codec work of a compressed all-reduce follows its recipe, lossy
// policies are never chosen unless allowed, and the refusals (zfp/zstd on a GPU system, a
// dp/params codec with ZeRO++, bad policies) name their values, also through the CLI (exit 2);
// a codec on an axis of size 1 warns and prices nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "plan/compression.h"
#include "plan/memory.h"
#include "plan/predict.h"
#include "plan/search.h"
#include "plan_test_util.h"
#include "test_util.h"

namespace weft::plan {
namespace {

using plan_test::grid;
using plan_test::one_level;

ModelShape small_model() { return ModelShape::from_config(make_model_config("t", 4, 4, 256, 256, 1024)); }

// The same one-level machine with a GPU device (compute units): codecs memory-bound, zfp and
// zstd refused.
System gpu_level(double bw, double lat) {
  System s = one_level(bw, lat);
  s.name = "flatgpu";
  s.device.name = "test GPU";
  s.device.compute_units = 10;
  s.device.gemm_tiles = {GemmTile{}};
  s.validate();
  return s;
}

Options opts(Precision p, int64_t batch) {
  Options o;
  o.precision = p;
  o.global_batch = batch;
  o.fp32_grad_accumulation = false;
  o.overlap_dp = false;
  o.pp_scatter_gather = false;
  return o;
}

Layout with(Layout l, const std::string& policy, int zero = 1) {
  const NamedPolicy np = parse_compression(policy);
  l.compression = np.policy;
  l.compression_name = np.name;
  l.zero = zero;
  return l;
}

CodecSpec codec(const std::string& name) { return parse_codec(name, "test"); }

void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const auto& frag : fragments) EXPECT_NE(m.find(frag), std::string::npos) << "missing '" << frag << "' in: " << m;
  }
}

void expect_same_prediction(const Prediction& a, const Prediction& b, const std::string& what) {
  EXPECT_EQ(a.step_time_s, b.step_time_s) << what;
  EXPECT_EQ(a.time.compute, b.time.compute) << what;
  EXPECT_EQ(a.time.tp_comm, b.time.tp_comm) << what;
  EXPECT_EQ(a.time.pp_bubble, b.time.pp_bubble) << what;
  EXPECT_EQ(a.time.dp_exposed, b.time.dp_exposed) << what;
  EXPECT_EQ(a.time.stragglers, b.time.stragglers) << what;
  EXPECT_EQ(a.t_p2p, b.t_p2p) << what;
  EXPECT_EQ(a.memory.total, b.memory.total) << what;
}

// Every kind of traffic's wire bytes are its raw bytes x the codec's ratio: codec_nominal_ratio
// on fp32 wires (e = 4), twice it on 16-bit wires, where bf16 saves nothing; the raw bytes are
// the uncompressed layout's. The loss's per-token sums stay exact (uncompressed).
TEST(PlanCompression, WireBytesScaleByTheCodecRatio) {
  const System s = one_level(10e9, 1e-6);
  const ModelShape m = small_model();
  const Options o = opts(Precision::kFp32, 16);
  const Layout a = grid(2, 1, 4), b = grid(1, 2, 4);  // tp, dp and params; pp
  const Prediction none_a = predict(m, s, with(a, "none"), o), none_b = predict(m, s, with(b, "none"), o);
  // The loss's exact all-reduce: 3 floats per token per micro-batch (tp codec-free).
  const double md = static_cast<double>(none_a.micro_batches);
  const double loss = md * 3 * static_cast<double>(m.seq) * 4;
  for (const char* name : {"bf16", "fp16", "int8", "int4"}) {
    const double r = codec_nominal_ratio(codec(name));
    const Prediction pa = predict(m, s, with(a, std::string("uniform-") + name), o);
    const Prediction pb = predict(m, s, with(b, std::string("uniform-") + name), o);
    EXPECT_EQ(pa.traffic.dp.raw, none_a.traffic.dp.raw) << name;
    EXPECT_NEAR(pa.traffic.dp.wire, r * pa.traffic.dp.raw, 1e-12 * pa.traffic.dp.raw) << name;
    EXPECT_NEAR(pa.traffic.params.wire, r * pa.traffic.params.raw, 1e-12 * pa.traffic.params.raw) << name;
    EXPECT_EQ(pa.traffic.tp.raw, none_a.traffic.tp.raw) << name;
    EXPECT_NEAR(pa.traffic.tp.wire, r * (pa.traffic.tp.raw - loss) + loss, 1e-12 * pa.traffic.tp.raw) << name;
    EXPECT_EQ(pb.traffic.pp.raw, none_b.traffic.pp.raw) << name;
    EXPECT_NEAR(pb.traffic.pp.wire, r * pb.traffic.pp.raw, 1e-12 * pb.traffic.pp.raw) << name;
    EXPECT_GT(pa.traffic.dp.codec_s, 0) << name;
    EXPECT_EQ(pa.traffic.dp.codec, name);
  }
  EXPECT_EQ(none_a.traffic.dp.wire, none_a.traffic.dp.raw);
  EXPECT_GT(none_a.traffic.dp.raw, 0);
  EXPECT_GT(none_a.traffic.params.raw, 0);
  EXPECT_GT(none_b.traffic.pp.raw, 0);
  // 16-bit wires (bf16 compute, 16-bit gradients): int8 is half the bytes, bf16 the same.
  const Options h = opts(Precision::kBf16, 16);
  const Prediction i8 = predict(m, s, with(a, "uniform-int8"), h);
  EXPECT_NEAR(i8.traffic.params.wire, 2 * codec_nominal_ratio(codec("int8")) * i8.traffic.params.raw, 1e-9 * i8.traffic.params.raw);
  EXPECT_NEAR(i8.traffic.dp.wire, 2 * codec_nominal_ratio(codec("int8")) * i8.traffic.dp.raw, 1e-9 * i8.traffic.dp.raw);
  const Prediction b16 = predict(m, s, with(a, "uniform-bf16"), h);
  EXPECT_DOUBLE_EQ(b16.traffic.params.wire, b16.traffic.params.raw);
  EXPECT_DOUBLE_EQ(wire_ratio(s, codec("zstd"), 2), codec_nominal_ratio(codec("zstd")));
}

// The tensor-parallel activation collectives are priced at what the run sends: the storage
// precision's bytes as Megatron-LM sends them ([defaults] tp_comm = "megatron": a bf16 run half
// an fp32 run's), and weft's with tp_comm = "weft". The loss's exact sums are fp32 in both.
TEST(PlanCompression, WeftTensorParallelCallsArePricedAtTheStoragePrecision) {
  // GPT's residual stream is 16-bit in a 16-bit run, and weft's tensor-parallel sums with it
  // (parallel/tp/mappings.h): its activation collectives carry half the fp32 bytes, as
  // Megatron-LM's do; what stays fp32 are the cross-entropy's statistics (priced in fp32 by
  // both) and, in weft, the LayerNorm weights' small sums under sp.
  const System s = one_level(10e9, 1e-6);
  const ModelShape m = small_model();
  for (bool sp : {false, true}) {
    Layout l = with(grid(2, 1, 4), "none");
    l.sequence_parallel = sp;
    const auto tp_bytes = [&](Precision p, const char* tp_comm) {
      Options o = opts(p, 16);
      o.tp_comm = tp_comm;
      const Prediction r = predict(m, s, l, o);
      const double loss = static_cast<double>(r.micro_batches) * 3 * static_cast<double>(m.seq) * 4;
      return std::pair{r.traffic.tp.raw - loss, r.time.tp_comm};
    };
    const auto [mb, mbt] = tp_bytes(Precision::kBf16, "megatron");
    const auto [mf, mft] = tp_bytes(Precision::kFp32, "megatron");
    const auto [wb, wbt] = tp_bytes(Precision::kBf16, "weft");
    const auto [wf, wft] = tp_bytes(Precision::kFp32, "weft");
    EXPECT_GT(mf, 0) << "sp " << sp;
    EXPECT_NEAR(2 * mb, mf, 1e-9 * mf) << "sp " << sp;
    EXPECT_GT(wf, 0) << "sp " << sp;
    if (!sp) {
      EXPECT_NEAR(2 * wb, wf, 1e-9 * wf);
    } else {
      // The LayerNorm weights' 2C sums stay fp32: a little more than half.
      EXPECT_GT(2 * wb, wf);
      EXPECT_LT(2 * wb, 1.01 * wf);
    }
    EXPECT_LT(wbt, wft) << "sp " << sp;
    EXPECT_LT(mbt, mft) << "sp " << sp;
  }
}

// Off is the uncompressed model, bit for bit, on every kind of layout; the dp term is the
// plain all-reduce's closed form; codecs on traffic a layout does not have change nothing.
TEST(PlanCompression, OffReproducesTheUncompressedPrediction) {
  const System f = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt-22b"));
  const Options o = Options::from_system(f, Precision::kFp16, 64);
  std::vector<Layout> layouts;
  for (int zero : {0, 1, 2, 3}) {
    Layout l = zero >= 2 ? grid(4, 1, 16) : grid(4, 4, 4);
    l.zero = zero;
    l.recompute = Recompute::kFull;
    layouts.push_back(l);
  }
  Layout inter = grid(2, 4, 8);
  inter.schedule = PipeSchedule::kInterleaved;
  inter.virtual_stages = 2;
  inter.sequence_parallel = true;
  layouts.push_back(inter);
  for (const Layout& l : layouts) {
    const Prediction plain = predict(m, f, l, o);
    Layout off = l;
    off.compression = parse_compression("dp=off,params=off,tp=off,pp=off").policy;
    off.compression_name = "custom";
    const Prediction p = predict(m, f, off, o);
    expect_same_prediction(plain, p, l.describe());
    for (const AxisTraffic* t : {&p.traffic.tp, &p.traffic.pp, &p.traffic.dp, &p.traffic.params}) {
      EXPECT_EQ(t->wire, t->raw) << l.describe();
      EXPECT_EQ(t->codec_s, 0.0) << l.describe();
    }
  }
  // ZeRO 0 without overlap: the gradient all-reduce's collective_time on the raw bytes.
  const System s = one_level(10e9, 1e-6);
  const Options fp32 = opts(Precision::kFp32, 8);
  const Layout z0 = with(grid(1, 1, 8), "none", 0);
  const double psi = stage_params_per_rank(small_model(), z0, 0);
  EXPECT_DOUBLE_EQ(predict(small_model(), s, z0, fp32).time.dp_exposed,
                   collective_time(s, Collective::kAllReduce, 8, 1, psi * 4));
  // One device: every codec falls on an axis of size 1.
  const Layout single = grid(1, 1, 1);
  expect_same_prediction(predict(small_model(), s, single, fp32), predict(small_model(), s, with(single, "uniform-int4", 0), fp32),
                         "uniform-int4 on one device");
}

// The codec work of each compressed collective (values one rank encodes and decodes), and its
// seconds at the speeds of the system file, the GPU's memory bandwidth or the CPU defaults.
TEST(PlanCompression, CodecWorkAndSpeeds) {
  const double V = 1e6, n = 8;
  const CodecWork ar = codec_work(Collective::kAllReduce, 8, V);
  EXPECT_DOUBLE_EQ(ar.encode, V + V / n);            // the whole buffer, then the own chunk
  EXPECT_DOUBLE_EQ(ar.decode, V * (n - 1) / n + V);  // n - 1 peers' chunks, then all n chunks
  const CodecWork rs = codec_work(Collective::kReduceScatter, 8, V);
  EXPECT_DOUBLE_EQ(rs.encode, V);
  EXPECT_DOUBLE_EQ(rs.decode, V * (n - 1) / n);
  const CodecWork ag = codec_work(Collective::kAllGather, 8, V);
  EXPECT_DOUBLE_EQ(ag.encode, V / n);
  EXPECT_DOUBLE_EQ(ag.decode, V);
  const CodecWork sr = codec_work(Collective::kSendRecv, 2, V);
  EXPECT_DOUBLE_EQ(sr.encode, V);
  EXPECT_DOUBLE_EQ(sr.decode, V);
  EXPECT_THROW(codec_work(Collective::kAllToAll, 8, V), InputError);

  System cpu = one_level(10e9, 1e-6);
  // CPU defaults (compression.h): int8 1.3 / 2.0 GB/s per core, x cores.
  EXPECT_DOUBLE_EQ(codec_seconds(cpu, codec("int8"), ar), 4 * ar.encode / 1.3e9 + 4 * ar.decode / 2.0e9);
  cpu.codecs.cores = 4;
  EXPECT_DOUBLE_EQ(codec_speed(cpu, codec("zfp:8")).encode, 4 * 0.15e9);
  // The system's [codecs]: a codec's own name wins over its family.
  cpu.codecs.per_core["zfp"] = {1e9, 2e9};
  cpu.codecs.per_core["zfp:8"] = {3e9, 5e9};
  EXPECT_DOUBLE_EQ(codec_speed(cpu, codec("zfp:8")).encode, 4 * 3e9);
  EXPECT_DOUBLE_EQ(codec_speed(cpu, codec("zfp:16")).decode, 4 * 2e9);
  std::string source;
  codec_speed(cpu, codec("zfp:8"), &source);
  EXPECT_NE(source.find("[codecs] zfp:8"), std::string::npos) << source;
  // A GPU: memory-bound, 4 bytes in and w out per value.
  const System gpu = gpu_level(10e9, 1e-6);
  const double w = 4 * codec_nominal_ratio(codec("int4"));
  EXPECT_DOUBLE_EQ(codec_speed(gpu, codec("int4")).encode, 4 * 1e11 / (4 + w));
}

// A compressed all-reduce's link time is the plain all-reduce's on the wire bytes; the step
// gains its codec seconds, counted whole (on a link slower than the CPU codec it pays off; at
// 1 GB/s it would not: int4's 1.3 GB/s encode costs more than the 7/8 of the bytes it saves).
TEST(PlanCompression, CompressedAllReduceIsPricedOnTheWireBytes) {
  const System s = one_level(1e8, 1e-6);
  const ModelShape m = small_model();
  const Options o = opts(Precision::kFp32, 8);
  const Layout l = with(grid(1, 1, 8), "dp=int4", 0);
  const double psi = stage_params_per_rank(m, l, 0);
  const CodecSpec c = codec("int4");
  const double wire = psi * 4 * codec_nominal_ratio(c);
  const double link = collective_time(s, Collective::kAllReduce, 8, 1, wire);
  const double codec_s = 4 * psi * (1 + 1.0 / 8) / 1.3e9 + 4 * psi * (7.0 / 8 + 1) / 2.0e9;
  const Prediction p = predict(m, s, l, o);
  EXPECT_NEAR(p.time.dp_exposed, link + codec_s, 1e-12 * (link + codec_s));
  EXPECT_NEAR(p.traffic.dp.codec_s, codec_s, 1e-12 * codec_s);
  EXPECT_LT(p.time.dp_exposed, predict(m, s, with(grid(1, 1, 8), "none", 0), o).time.dp_exposed);
  // Error feedback keeps an fp32 residual per gradient element.
  Layout ef = l;
  ef.compression.error_feedback = true;
  EXPECT_DOUBLE_EQ(worst_stage_memory(m, ef, o.memory()).comm - worst_stage_memory(m, l, o.memory()).comm, 4 * psi);
}

// The search tries none and the lossless presets; lossy ones only when allowed, even where
// they are faster.
TEST(PlanCompression, LossyPoliciesAreNotChosenUnlessAllowed) {
  const System slow = one_level(50e6, 1e-6);  // a CPU on a slow link: int4 wins when allowed
  const ModelShape m = small_model();
  const Options o = opts(Precision::kFp32, 8);
  const SearchResult plain = search_layouts(m, slow, 8, o, Pins{}, 50);
  ASSERT_FALSE(plain.top.empty());
  for (const Prediction& p : plain.top) EXPECT_TRUE(lossless(p.layout.compression)) << p.layout.describe();
  Pins lossy;
  lossy.allow_lossy = true;
  const SearchResult any = search_layouts(m, slow, 8, o, lossy, 5);
  ASSERT_FALSE(any.top.empty());
  EXPECT_FALSE(lossless(any.top[0].layout.compression)) << any.top[0].layout.describe();
  EXPECT_LT(any.top[0].step_time_s, plain.top[0].step_time_s);
  EXPECT_GT(any.evaluated, plain.evaluated);
  // The preset lists.
  auto names = [](const std::vector<NamedPolicy>& v) {
    std::vector<std::string> out;
    for (const auto& p : v) out.push_back(p.name);
    return out;
  };
  const System gpu = gpu_level(10e9, 1e-6);
  EXPECT_EQ(names(compression_presets(gpu, false)), (std::vector<std::string>{"none"}));
  EXPECT_EQ(names(compression_presets(slow, false)), (std::vector<std::string>{"none", "uniform-zstd"}));
  for (const auto& p : compression_presets(gpu, true)) EXPECT_EQ(compression_system_error(p.policy, gpu), "") << p.name;
  const std::vector<std::string> cpu_all = names(compression_presets(slow, true));
  for (const char* n : {"hybrid", "hybrid-zfp", "uniform-int8", "uniform-int4", "uniform-zfp:8"}) {
    EXPECT_NE(std::find(cpu_all.begin(), cpu_all.end(), n), cpu_all.end()) << n;
  }
  // A pinned policy is priced on every layout, lossy or not.
  Pins pinned;
  pinned.compression = parse_compression("hybrid");
  for (const Prediction& p : search_layouts(m, slow, 8, o, pinned, 50).top) EXPECT_EQ(p.layout.compression_name, "hybrid");
}

// zfp and zstd on a GPU system, and dp/params codecs with ZeRO++, are refused naming the values;
// a codec on an axis of size 1 warns and prices nothing.
TEST(PlanCompression, Refusals) {
  const System gpu = gpu_level(10e9, 1e-6);
  const ModelShape m = small_model();
  const Options o = opts(Precision::kBf16, 8);
  expect_input_error([&] { predict(m, gpu, with(grid(1, 1, 8), "hybrid-zfp"), o); },
                     {"dp=zfp:8", "flatgpu", "test GPU", "10 compute units", "CPU only"});
  expect_input_error([&] { predict(m, gpu, with(grid(2, 1, 4), "tp=zstd:3"), o); }, {"tp=zstd:3", "flatgpu"});
  Pins pins;
  pins.compression = parse_compression("uniform-zfp:8");
  expect_input_error([&] { search_layouts(m, gpu, 8, o, pins, 5); }, {"--compression uniform-zfp:8", "flatgpu"});
  EXPECT_NO_THROW(predict(m, one_level(10e9, 1e-6), with(grid(1, 1, 8), "hybrid-zfp"), o));  // a CPU runs zfp

  Layout zpp = with(grid(1, 1, 8), "hybrid", 3);
  zpp.zeropp = ZeroPP::kCustom;
  zpp.qgz = true;
  expect_input_error([&] { predict(m, gpu, zpp, o); }, {"dp=int4", "params=bf16", "ZeRO++", "qgz"});
  zpp.compression = parse_compression("tp=bf16").policy;
  EXPECT_NO_THROW(predict(m, gpu, zpp, o));
  Pins zpins;
  zpins.zero = 3;
  zpins.zeropp = ZeroPP::kZeroPP;
  zpins.compression = parse_compression("uniform-int8");
  expect_input_error([&] { search_layouts(m, gpu, 8, o, zpins, 5); }, {"--compression uniform-int8", "ZeRO++"});

  // Axes of size 1: warned, and priced as the codecs that have traffic.
  const Layout l = with(grid(1, 1, 8), "hybrid", 0);
  const std::vector<std::string> w = compression_warnings(l.compression, l);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("params=bf16"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("zero 0"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("tp=bf16"), std::string::npos) << w[1];
  EXPECT_NE(w[1].find("tp 1"), std::string::npos) << w[1];
  Layout dp_only = l;
  dp_only.compression = effective_policy(l.compression, l);
  EXPECT_TRUE(same_policy(dp_only.compression, parse_compression("dp=int4").policy));
  expect_same_prediction(predict(m, gpu, l, o), predict(m, gpu, dp_only, o), "hybrid on tp 1 pp 1 zero 0");
}

TEST(PlanCompression, PoliciesParse) {
  const NamedPolicy h = parse_compression("hybrid");
  EXPECT_EQ(h.name, "hybrid");
  EXPECT_EQ(h.policy.dp.name(), "int4");
  EXPECT_EQ(h.policy.params.name(), "bf16");  // the loss study: int8 gathers cost 2-3% (docs/compression.md)
  EXPECT_EQ(h.policy.tp.name(), "bf16");
  EXPECT_TRUE(h.policy.pp.off());
  EXPECT_EQ(parse_compression("hybrid-zfp").policy.dp.name(), "zfp:8");
  const NamedPolicy u = parse_compression("uniform-zstd:3");
  EXPECT_EQ(u.policy.pp.name(), "zstd:3");
  EXPECT_TRUE(lossless(u.policy));
  EXPECT_FALSE(lossless(h.policy));
  const NamedPolicy c = parse_compression("dp=int4,tp=bf16,ef=on");
  EXPECT_EQ(c.name, "custom");
  EXPECT_EQ(c.policy.dp.name(), "int4");
  EXPECT_TRUE(c.policy.params.off());
  EXPECT_TRUE(c.policy.error_feedback);
  EXPECT_FALSE(parse_compression("none").policy.any());
  expect_input_error([] { parse_compression("fast"); }, {"--compression fast", "hybrid", "uniform-"});
  expect_input_error([] { parse_compression("uniform-int9"); }, {"int9", "codecs:"});
  expect_input_error([] { parse_compression("uniform-off"); }, {"uniform-off", "'none'"});
  expect_input_error([] { parse_compression("dp=int4,dp=int8"); }, {"dp is given twice"});
  expect_input_error([] { parse_compression("mp=int4"); }, {"unknown axis 'mp'"});
  expect_input_error([] { parse_compression("dp=int4,tp"); }, {"'tp' is not axis=codec"});
  expect_input_error([] { parse_compression("tp=bf16,ef=on"); }, {"ef=on", "dp is off"});
  expect_input_error([] { parse_compression("dp=int4,ef=yes"); }, {"ef must be on or off", "yes"});
  expect_input_error([] { parse_compression("dp=zfp:0"); }, {"zfp", "rate"});
}

// [codecs] of a system file: loaded, used, written back; bad keys and values refused.
TEST(PlanCompression, SystemFileCodecs) {
  test::TempDir tmp("plancodec");
  const std::string base =
      "[device]\npeak_flops_16 = 1e12\npeak_flops_32 = 1e12\nmemory_bytes = 1e9\nmemory_bandwidth = 1e10\n"
      "[[level]]\nbandwidth = 1e9\nlatency = 0\n";
  const std::string path = tmp / "c.toml";
  std::ofstream(path) << base << "[codecs]\ncores = 2\nzstd_ratio = 0.8\nint8 = [1e9, 3e9]\n\"zfp:8\" = [2e8, 4e8]\n";
  const System s = load_system(path);
  EXPECT_DOUBLE_EQ(s.codecs.cores, 2);
  EXPECT_DOUBLE_EQ(codec_speed(s, codec("int8")).decode, 6e9);
  EXPECT_DOUBLE_EQ(codec_speed(s, codec("zfp:8")).encode, 4e8);
  EXPECT_DOUBLE_EQ(wire_ratio(s, codec("zstd"), 4), 0.8);
  const std::string copy = tmp / "copy.toml";
  std::ofstream(copy) << system_to_toml(s);
  const System c = load_system(copy);
  EXPECT_DOUBLE_EQ(c.codecs.per_core.at("zfp:8").decode, 4e8);
  EXPECT_DOUBLE_EQ(c.codecs.zstd_ratio, 0.8);
  auto bad = [&](const std::string& section, const std::vector<std::string>& fragments) {
    const std::string p = tmp / "bad.toml";
    std::ofstream(p) << base << "[codecs]\n" << section;
    expect_input_error([&] { load_system(p); }, fragments);
  };
  bad("lz4 = [1e9, 1e9]\n", {"bad.toml", "unknown key 'lz4'", "zfp:RATE"});
  bad("int8 = [1e9]\n", {"int8 must be [encode, decode]"});
  bad("int8 = [0, 1e9]\n", {"int8 = [0,", "positive"});
  bad("cores = 0\n", {"cores", "got 0"});
  bad("zstd_ratio = 3\n", {"zstd_ratio", "got 3"});
  bad("off = [1e9, 1e9]\n", {"'off' is no codec"});
}

class PlanCompressionCli : public ::testing::Test {
 protected:
  void SetUp() override { tmp = std::make_unique<test::TempDir>("plancomp"); }
  test::RunResult weft(const std::string& args) { return test::run_weft(args, *tmp / fmt::format("cmd{}", n++)); }
  std::unique_ptr<test::TempDir> tmp;
  int n = 0;
};

void expect_refused(const test::RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

const std::string kPinned =
    "plan --model gpt-175b --system systems/frontier.toml --global-batch 640 --precision fp16 --tp 4 --pp 16 --dp 2 "
    "--micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --schedule 1f1b ";

TEST_F(PlanCompressionCli, PinsParseAndExplainShowsRawAndWireBytes) {
  const test::RunResult r = weft(kPinned + "--compression dp=int4,params=int8,tp=int8 --format json --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)[0];
  EXPECT_EQ(j["compression"]["preset"], "custom");
  EXPECT_EQ(j["compression"]["dp"], "int4");
  EXPECT_EQ(j["compression"]["tp"], "int8");
  EXPECT_EQ(j["compression"]["pp"], "off");
  EXPECT_GT(j["compression"]["codec_s"].get<double>(), 0);
  const auto& t = j["explain"]["traffic"];
  EXPECT_LT(t["dp"]["wire_bytes"].get<double>(), 0.5 * t["dp"]["raw_bytes"].get<double>());
  EXPECT_EQ(t["pp"]["wire_bytes"], t["pp"]["raw_bytes"]);
  EXPECT_EQ(t["tp"]["codec"], "int8");
  const test::RunResult text = weft(kPinned + "--compression hybrid --explain");
  ASSERT_EQ(text.code, 0) << text.err;
  for (const char* k : {"hybrid(dp=int4 params=bf16 tp=bf16)", "compressed collectives, per device per step",
                        "codec bf16 (encode + decode)", "int4 of",
                        "what the lossy codecs cost the loss (measured: docs/compression.md",
                        "params bf16: bf16 gathers kept the loss within 1%", "tp bf16: no change to the loss"}) {
    EXPECT_NE(text.out.find(k), std::string::npos) << k << " in " << text.out;
  }
  // int8 parameter gathers: their measured cost, in the text and the JSON.
  const test::RunResult p8 = weft(kPinned + "--compression dp=int4,params=int8,tp=int4 --format json --explain");
  ASSERT_EQ(p8.code, 0) << p8.err;
  const auto costs = nlohmann::json::parse(p8.out)[0]["explain"]["loss_costs"];
  ASSERT_EQ(costs.size(), 3u) << costs.dump();
  EXPECT_NE(costs[0].get<std::string>().find("params int8: int8 parameter gathers cost 2-3%"), std::string::npos);
  EXPECT_NE(costs[1].get<std::string>().find("tp int4: 16-18% relative error"), std::string::npos);
  EXPECT_NE(costs[2].get<std::string>().find("dp int4"), std::string::npos);
  const test::RunResult none = weft(kPinned + "--format json");
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(nlohmann::json::parse(none.out)[0]["compression"]["preset"], "none");
}

TEST_F(PlanCompressionCli, RefusalsExitTwo) {
  expect_refused(weft(kPinned + "--compression uniform-zfp:8"), {"zfp:8", "frontier", "CPU only"});
  expect_refused(weft(kPinned + "--compression dp=int9"), {"int9"});
  expect_refused(weft(kPinned + "--compression hybrid --allow-lossy"), {"--allow-lossy", "hybrid"});
  expect_refused(weft(kPinned + "--compression everything"), {"--compression everything", "any"});
}

// Searching with --compression any (or --allow-lossy) may return lossy layouts; a pinned codec on
// an axis of size 1 warns on stderr and the plan goes on.
TEST_F(PlanCompressionCli, AnyAllowsLossyAndSizeOneWarns) {
  const std::string base = "plan --model gpt-20b --system systems/lassen.toml --gpus 192 --global-batch 192 --precision fp16 "
                           "--tp 2 --pp 4 --micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --format json ";
  const test::RunResult plain = weft(base);
  const test::RunResult any = weft(base + "--compression any");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(any.code, 0) << any.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)[0]["compression"]["preset"], "none");
  EXPECT_NE(nlohmann::json::parse(any.out)[0]["compression"]["preset"], "none");
  EXPECT_EQ(weft(base + "--allow-lossy").out, any.out);
  const test::RunResult warn = weft(
      "plan --model gpt2-350m --system systems/lassen.toml --gpus 8 --global-batch 8 --precision fp16 --tp 1 --pp 1 "
      "--micro-batch 1 --zero 1 --recompute full --compression hybrid --format json");
  ASSERT_EQ(warn.code, 0) << warn.err;
  EXPECT_NE(warn.err.find("tp=bf16 has nothing to compress"), std::string::npos) << warn.err;
}

}  // namespace
}  // namespace weft::plan
