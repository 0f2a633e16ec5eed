// The SVG builder: number formatting, escaping, well-formed documents, errors for non-finite
// coordinates and unbalanced groups, and atomic file saving.
#include "attn/report/svg.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "attn/core/error.h"
#include "unit/report/xml_check.h"

namespace attn::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(XmlCheck, RejectsBrokenDocumentsSoTheOtherTestsCanFail) {
  EXPECT_TRUE(test::check_xml("<svg><g><rect x=\"1\"/></g></svg>").error.empty());
  EXPECT_FALSE(test::check_xml("<svg><g></svg>").error.empty());
  EXPECT_FALSE(test::check_xml("<svg><text>a < b</text></svg>").error.empty());
  EXPECT_FALSE(test::check_xml("<svg><text>a & b</text></svg>").error.empty());
  EXPECT_FALSE(test::check_xml("<svg x=1></svg>").error.empty());
  EXPECT_FALSE(test::check_xml("<svg></svg><svg></svg>").error.empty());
}

TEST(Svg, FormatNumberTrimsZerosAndNeverPrintsMinusZero) {
  EXPECT_EQ(format_number(1.5), "1.5");
  EXPECT_EQ(format_number(2.0), "2");
  EXPECT_EQ(format_number(0.125, 2), "0.12");  // round-half-even of the binary value 0.125
  EXPECT_EQ(format_number(1.23456, 3), "1.235");
  EXPECT_EQ(format_number(-0.0001), "0");
  EXPECT_EQ(format_number(-0.0), "0");
  EXPECT_EQ(format_number(-3.25, 1), "-3.2");
  EXPECT_EQ(format_number(1e6), "1000000");
}

TEST(Svg, FormatNumberRejectsNanAndInfinity) {
  EXPECT_THROW(format_number(kNaN), Error);
  EXPECT_THROW(format_number(kInf), Error);
  EXPECT_THROW(format_number(-kInf), Error);
  EXPECT_THROW(format_number(1.0, -1), Error);
}

TEST(Svg, XmlEscapeCoversTheFiveSpecialCharacters) {
  EXPECT_EQ(xml_escape("<a href=\"x\">Tom & 'Jerry'</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
  EXPECT_EQ(xml_escape("plain"), "plain");
  EXPECT_EQ(xml_escape(std::string("a\x01z", 3)), "az");  // control characters are not XML
}

TEST(Svg, TextWidthCountsCodePointsNotBytes) {
  EXPECT_DOUBLE_EQ(text_width("abc", 10), 18);
  EXPECT_DOUBLE_EQ(text_width("\u2212\u221e", 10), 12);  // two code points, six bytes
}

TEST(Svg, RgbHexAndLuminance) {
  EXPECT_EQ((Rgb{255, 0, 16}).hex(), "#ff0010");
  EXPECT_DOUBLE_EQ((Rgb{0, 0, 0}).luminance(), 0);
  EXPECT_NEAR((Rgb{255, 255, 255}).luminance(), 1, 1e-12);
}

TEST(Svg, DocumentIsWellFormedAndEscapesEveryString) {
  Svg svg;
  svg.rect(1, 2, 3, 4, {.fill = "#ff0000", .stroke = "#000000"}, "tip <&>");
  svg.line(0, 0, 10, 10, "#00ff00", 2, "4 2");
  svg.polyline({{0, 0}, {1, 1}, {2, 0.5}}, "#0000ff");
  svg.circle(5, 5, 2, "#123456");
  svg.begin_group(10, 20);
  svg.text(1, 2, "a < b & \"c\"", {.size = 11, .anchor = Anchor::Middle, .bold = true, .rotate = -90});
  svg.end_group();
  const std::string doc = svg.document(100, 50, "title <x>");
  const test::XmlSummary xml = test::check_xml(doc);
  ASSERT_TRUE(xml.error.empty()) << xml.error << "\n" << doc;
  EXPECT_EQ(xml.elements.at("svg"), 1);
  EXPECT_EQ(xml.elements.at("rect"), 2);  // the white background and ours
  EXPECT_EQ(xml.elements.at("line"), 1);
  EXPECT_EQ(xml.elements.at("polyline"), 1);
  EXPECT_EQ(xml.elements.at("circle"), 1);
  EXPECT_EQ(xml.elements.at("title"), 2);
  EXPECT_NE(doc.find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(doc.find("title &lt;x&gt;"), std::string::npos);
  EXPECT_NE(doc.find("viewBox=\"0 0 100 50\""), std::string::npos);
  EXPECT_NE(doc.find("rotate(-90 1 2)"), std::string::npos);
  EXPECT_EQ(doc.find("nan"), std::string::npos);
}

TEST(Svg, NonFiniteCoordinatesAreErrors) {
  Svg svg;
  EXPECT_THROW(svg.rect(kNaN, 0, 1, 1, {}), Error);
  EXPECT_THROW(svg.rect(0, 0, -1, 1, {}), Error);
  EXPECT_THROW(svg.line(0, 0, kInf, 1, "#000000"), Error);
  EXPECT_THROW(svg.polyline({{0, 0}, {1, kNaN}}, "#000000"), Error);
  EXPECT_THROW(svg.polyline({}, "#000000"), Error);
  EXPECT_THROW(svg.text(0, kNaN, "x"), Error);
  EXPECT_THROW(svg.circle(0, 0, kInf, "#000000"), Error);
  EXPECT_THROW((void)svg.document(kNaN, 10), Error);
  EXPECT_THROW((void)svg.document(0, 10), Error);
  EXPECT_EQ(svg.body(), "");  // nothing half-written by the failed calls
}

TEST(Svg, UnbalancedGroupsAreErrors) {
  Svg svg;
  EXPECT_THROW(svg.end_group(), Error);
  svg.begin_group(0, 0);
  EXPECT_THROW((void)svg.document(10, 10), Error);
  Svg outer;
  EXPECT_THROW(outer.embed(svg, 0, 0), Error);
  svg.end_group();
  outer.embed(svg, 5, 5);
  EXPECT_TRUE(test::check_xml(outer.document(10, 10)).error.empty());
}

TEST(Svg, SameCallsGiveSameBytes) {
  auto build = [] {
    Svg svg;
    svg.rect(0.1, 0.2, 0.3, 0.4, {.fill = "#abcdef"});
    svg.text(1.0 / 3.0, 2.0 / 3.0, "x");
    return svg.document(10.5, 20.25);
  };
  EXPECT_EQ(build(), build());
}

TEST(Svg, SaveTextFileReplacesTheFileAndLeavesNoTemporary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attn_svg_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "fig.svg").string();
  save_text_file(path, "first");
  save_text_file(path, "second <svg/>");
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "second <svg/>");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  EXPECT_THROW(save_text_file((dir / "missing_dir" / "x.svg").string(), "x"), Error);
  EXPECT_THROW(save_text_file("", "x"), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attn::report
