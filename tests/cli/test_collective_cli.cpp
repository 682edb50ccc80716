// `trainplan collective` and `validate-published --suite nccl`: nccl-tests-style tables, JSON, bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "../temp_dir.hpp"

namespace tp {
namespace {

using testutil::has;
using testutil::tp_run;

TEST(CollectiveCli, PrintsNcclTestsColumnsAndNcclsChoice) {
  auto o = tp_run("collective --cluster dgx-h100 --op all_reduce --ranks 8 --bytes 1M:1G --factor 4");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "algbw(GB/s)  busbw(GB/s)")) << o.text;
  EXPECT_TRUE(has(o.text, "NVLS")) << o.text;
  EXPECT_TRUE(has(o.text, "1073741824")) << o.text;
  auto j = tp_run("collective --cluster selene --op all_gather --ranks 64 --bytes 64M --json -");
  ASSERT_EQ(j.rc, 0) << j.text;
  const auto v = nlohmann::json::parse(j.text);
  ASSERT_EQ(v["rows"].size(), 1u);
  EXPECT_EQ(v["nodes"], 8);
  EXPECT_EQ(v["rows"][0]["algorithm"], "Ring");
  EXPECT_GT(v["rows"][0]["busbw_GBps"].get<double>(), 50);
  // all-to-all and send/recv run as point-to-point
  auto a = tp_run("collective --cluster dgx-h100 --op all_to_all --ranks 16 --bytes 256M");
  ASSERT_EQ(a.rc, 0) << a.text;
  EXPECT_TRUE(has(a.text, "P2P")) << a.text;
}

TEST(CollectiveCli, BadInputIsOneClearLineAndExitTwo) {
  struct Case { const char* args; const char* says; };
  const Case cases[] = {
      {"collective --cluster dgx-h100 --op allreduce --ranks 8", "did you mean \"all_reduce\""},
      {"collective --cluster dgx-h10 --op all_reduce --ranks 8", "did you mean \"dgx-h100\""},
      {"collective --cluster dgx-h100 --op all_reduce --ranks 1", "--ranks expects a whole number from 2"},
      {"collective --cluster dgx-h100 --op all_reduce --ranks 12", "not a multiple of the ranks per node"},
      {"collective --cluster dgx-h100 --op all_reduce --ranks 8 --bytes 1Q", "--bytes takes sizes"},
      {"collective --cluster dgx-h100 --op all_reduce --ranks 8 --bytes 8G:1M", "MIN <= MAX"},
      {"collective --cluster selene --op all_reduce --ranks 8 --algo nvls", "NCCL does not run allreduce with NVLS"},
      {"collective --cluster dgx-h100 --op all_reduce", "collective needs --ranks"},
  };
  for (const Case& c : cases) {
    auto o = tp_run(c.args);
    EXPECT_EQ(o.rc, 2) << c.args << "\n" << o.text;
    EXPECT_TRUE(has(o.text, c.says)) << c.args << "\n" << o.text;
  }
}

TEST(CollectiveCli, ValidatePublishedNcclSuitePrintsEveryPointAndTheSummary) {
  auto o = tp_run("validate-published --suite nccl");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "h100-dgx-1n-ar-nvdgxc")) << o.text;
  EXPECT_TRUE(has(o.text, "points within 10%")) << o.text;
}

}  // namespace
}  // namespace tp
