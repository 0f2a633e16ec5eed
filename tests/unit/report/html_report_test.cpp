// The HTML report: every figure inlined, every metric and config entry present and escaped,
// deterministic bytes, atomic writing, and errors for missing or malformed figures.
#include "attn/report/html_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "attn/core/error.h"
#include "attn/report/figures.h"
#include "unit/report/xml_check.h"

namespace attn::report {
namespace {

namespace fs = std::filesystem;

class HtmlReport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attn_html_report_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Two figures on disk and a report that names them.
  ReportInput sample() {
    save_text_file(path("heat.svg"), heatmap(Matrix({0.9, 0.1, 0.2, 0.8}, 2, 2),
                                             {.title = "Cross-attention UNIQUE_HEAT", .col_labels = {"<bos>", "7"}}));
    TrainingHistory h{.epoch = {1, 2, 3}, .loss = {2.0, 1.0, 0.5}, .val_token_acc = {0.3, 0.6, 0.9}};
    save_text_file(path("curve.svg"), training_curve_figure(h, "UNIQUE_CURVE"));
    ReportInput in;
    in.title = "Reversal <8 digits> & more";
    in.config = {{"d_model", "64"}, {"heads", "4"}, {"task", "reverse <digits>"}};
    in.metrics = {{{"epoch", 1}, {"loss", 2.0}, {"val_token_acc", 0.3}},
                  {{"epoch", 2}, {"loss", 1.0}, {"val_exact_acc", 0.125}}};
    in.figures = {{"Training curve", "curve.svg", "Loss & accuracy per epoch."},
                  {"Attention", "heat.svg", "Head average."}};
    in.sections = {{"Sample translations", "3 7 1 4 -> 4 1 7 3\n<eos> ok", true},
                   {"Notes", "First paragraph.\n\nSecond & last.", false}};
    return in;
  }

  fs::path dir_;
};

TEST_F(HtmlReport, ContainsEveryFigureInlinedAndEveryMetric) {
  const ReportInput in = sample();
  write_report(path("report.html"), in);
  const std::string html = read(path("report.html"));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<meta charset=\"utf-8\">"), std::string::npos);
  // Figures: the SVG text itself is in the page, once each, and well-formed.
  EXPECT_EQ(test::count_of(html, "<svg "), 2);
  EXPECT_NE(html.find("UNIQUE_HEAT"), std::string::npos);
  EXPECT_NE(html.find("UNIQUE_CURVE"), std::string::npos);
  for (size_t p = html.find("<svg "); p != std::string::npos; p = html.find("<svg ", p + 1)) {
    const size_t end = html.find("</svg>", p) + 6;
    const test::XmlSummary xml = test::check_xml(html.substr(p, end - p));
    EXPECT_TRUE(xml.error.empty()) << xml.error;
  }
  for (const char* s :
       {"Training curve", "Attention", "Loss &amp; accuracy per epoch.", "href=\"curve.svg\"", "href=\"heat.svg\""}) {
    EXPECT_NE(html.find(s), std::string::npos) << s;
  }
  // Metrics: the union of columns in first-seen order, numbers right-aligned, a missing cell empty.
  for (const char* s :
       {"<th>epoch</th><th>loss</th><th>val_token_acc</th><th>val_exact_acc</th>",
        "<tr><td class=\"num\">1</td><td class=\"num\">2</td><td class=\"num\">0.3</td><td></td></tr>",
        "<tr><td class=\"num\">2</td><td class=\"num\">1</td><td></td><td class=\"num\">0.125</td></tr>"}) {
    EXPECT_NE(html.find(s), std::string::npos) << s;
  }
  // Config, title and text sections, escaped.
  for (const char* s :
       {"<th>d_model</th><td>64</td>", "reverse &lt;digits&gt;", "Reversal &lt;8 digits&gt; &amp; more",
        "<pre>3 7 1 4 -&gt; 4 1 7 3\n&lt;eos&gt; ok</pre>", "<p>First paragraph.</p>", "<p>Second &amp; last.</p>"}) {
    EXPECT_NE(html.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(html.find("<8 digits>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST_F(HtmlReport, SameInputGivesSameBytesAndNoTemporaryIsLeft) {
  const ReportInput in = sample();
  write_report(path("report.html"), in);
  const std::string first = read(path("report.html"));
  write_report(path("report.html"), in);
  EXPECT_EQ(read(path("report.html")), first);
  EXPECT_EQ(render_report(in, dir_.string()), first);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 3);  // two figures and the report
}

TEST_F(HtmlReport, MissingOrMalformedFigureIsAnErrorAndWritesNothing) {
  ReportInput in = sample();
  in.figures.push_back({"Gone", "missing.svg", ""});
  EXPECT_THROW(write_report(path("report.html"), in), Error);
  EXPECT_FALSE(fs::exists(path("report.html")));
  in.figures.back() = {"Not SVG", "bad.svg", ""};
  save_text_file(path("bad.svg"), "<html>not a figure</html>");
  EXPECT_THROW(write_report(path("report.html"), in), Error);
  in.figures.back() = {"No file", "", ""};
  EXPECT_THROW(write_report(path("report.html"), in), Error);
  in.figures.back() = {"Picture", "missing.png", ""};
  EXPECT_THROW(write_report(path("report.html"), in), Error);
  EXPECT_FALSE(fs::exists(path("report.html")));
}

TEST_F(HtmlReport, OtherImageTypesAreLinkedWithImg) {
  ReportInput in;
  in.figures = {{"Architecture <png>", "arch.png", "From elsewhere."}};
  save_text_file(path("arch.png"), "\x89PNG");
  const std::string html = render_report(in, dir_.string());
  EXPECT_NE(html.find("<img src=\"arch.png\" alt=\"Architecture &lt;png&gt;\">"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
}

TEST(MetricValue, FormatsNumbersCompactlyAndShowsNonFinite) {
  EXPECT_EQ(MetricValue(2.0).text, "2");
  EXPECT_EQ(MetricValue(0.984375).text, "0.984375");
  EXPECT_EQ(MetricValue(0.1234567).text, "0.123457");
  EXPECT_EQ(MetricValue(1e-7).text, "1e-07");
  EXPECT_EQ(MetricValue(std::numeric_limits<double>::quiet_NaN()).text, "nan");
  EXPECT_EQ(MetricValue(-std::numeric_limits<double>::infinity()).text, "-inf");
  EXPECT_EQ(MetricValue(int64_t{25}).text, "25");
  EXPECT_EQ(MetricValue(size_t{7}).text, "7");
  EXPECT_EQ(MetricValue(-3LL).text, "-3");
  EXPECT_TRUE(MetricValue(25).numeric);
  EXPECT_FALSE(MetricValue("x").numeric);
}

}  // namespace
}  // namespace attn::report
