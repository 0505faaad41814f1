// `weft export`: a checkpoint's weights as a Hugging Face folder in bf16, fp16 or fp32. Every
// tensor of the export holds the source's fp32 master weights rounded to nearest even (fp32:
// the same bytes); config.json says the dtype; the export evaluates as the source does (fp32:
// bitwise; bf16: within bf16's rounding of the weights); bad requests are one line, exit 2,
// and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/precision.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::RunResult;

void expect_refused(const RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << r.err;
  const std::string first = r.err.substr(0, r.err.find('\n'));
  for (const auto& f : fragments) EXPECT_NE(first.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

class Export : public test::CliFixture {
 protected:
  Export() : CliFixture("export") {}
  double eval_loss(const std::string& ckpt) {
    const RunResult r = weft("eval --checkpoint " + ckpt + " --data " + *tmp / "data/x_val_000000.bin --windows 8 --format json");
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out)["loss"].get<double>() : -1.0;
  }
};

TEST_F(Export, EveryDtypeHoldsTheRoundedMasterWeights) {
  RunResult r = weft("train " + config);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string ckpt = *tmp / "run/step-000002";
  SafetensorsFile src(ckpt + "/model.safetensors");
  const double base = eval_loss(*tmp / "run");
  for (const char* dtype : {"bf16", "fp16", "fp32"}) {
    const std::string out = *tmp / fmt::format("hf-{}", dtype);
    r = weft(fmt::format("export --checkpoint {} --out {} --dtype {}", *tmp / "run", out, dtype));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(fmt::format("in {}", dtype)), std::string::npos) << r.out;
    SafetensorsFile f(out + "/model.safetensors");
    ASSERT_EQ(f.names(), src.names());
    const StDType want = std::string(dtype) == "bf16" ? StDType::kBF16 : std::string(dtype) == "fp16" ? StDType::kF16 : StDType::kF32;
    int64_t differ = 0, total = 0;
    for (const std::string& name : src.names()) {
      const SafetensorsTensorInfo& a = src.info(name);
      const SafetensorsTensorInfo& b = f.info(name);
      EXPECT_EQ(b.dtype, want) << name;
      EXPECT_EQ(b.shape, a.shape) << name;
      std::vector<float> x(static_cast<size_t>(a.numel)), y(static_cast<size_t>(b.numel));
      src.read_f32(name, a.shape, x.data());
      f.read_f32(name, b.shape, y.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const float expect = want == StDType::kBF16 ? round_bf16(x[i]) : want == StDType::kF16 ? round_fp16(x[i]) : x[i];
        if (y[i] != expect) ++differ;
        ++total;
      }
    }
    EXPECT_EQ(differ, 0) << dtype << ": of " << total;
    const auto config = nlohmann::json::parse(test::read_text(out + "/config.json"));
    EXPECT_EQ(config["torch_dtype"], std::string(dtype) == "bf16" ? "bfloat16" : std::string(dtype) == "fp16" ? "float16" : "float32");
    // 16 bits per value: about half the fp32 file.
    if (want != StDType::kF32) {
      EXPECT_LT(fs::file_size(out + "/model.safetensors"), fs::file_size(ckpt + "/model.safetensors") * 0.51);
    }
    // The export is a checkpoint weft evaluates: fp32 gives the source's loss bit for bit.
    const double loss = eval_loss(out);
    if (want == StDType::kF32) {
      EXPECT_EQ(loss, base);
    } else {
      EXPECT_NEAR(loss, base, 0.01 * base) << dtype;
    }
  }
}

TEST_F(Export, BadRequestsAreRefusedAndWriteNothing) {
  RunResult r = weft("train " + config);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string out = *tmp / "hf";
  expect_refused(weft("export --checkpoint " + *tmp / "run --out " + out + " --dtype int8"), {"--dtype", "int8"});
  EXPECT_FALSE(fs::exists(out));
  expect_refused(weft("export --checkpoint " + *tmp / "nope --out " + out), {"nope"});
  EXPECT_FALSE(fs::exists(out));
  ASSERT_EQ(weft("export --checkpoint " + *tmp / "run --out " + out).code, 0);
  const std::string bytes = test::read_text(out + "/model.safetensors");
  expect_refused(weft("export --checkpoint " + *tmp / "run --out " + out + " --dtype fp32"), {out, "--overwrite"});
  EXPECT_EQ(test::read_text(out + "/model.safetensors"), bytes);
  expect_refused(weft("export --checkpoint " + *tmp / "run/step-000002 --out " + *tmp / "run/step-000002 --overwrite"),
                 {"is the checkpoint being exported"});
  EXPECT_EQ(weft("export --checkpoint " + *tmp / "run --out " + out + " --dtype fp32 --overwrite").code, 0);
}

}  // namespace
}  // namespace weft
