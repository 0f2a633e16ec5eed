// Seed 001's figures 1 and 4 drawn from a model's numbers: well-formed SVG carrying the given
// sizes (so a different config draws a different figure), the family's stacks, and errors for
// specs that describe no model.
#include "attn/report/model_figures.h"

#include <gtest/gtest.h>

#include <string>

#include "attn/core/error.h"
#include "unit/report/xml_check.h"

namespace attn::report {
namespace {

ArchitectureSpec paper_like() {
  ArchitectureSpec a;
  a.family = "encoder_decoder";
  a.encoder_layers = 6;
  a.decoder_layers = 4;
  a.d_model = 512;
  a.heads = 8;
  a.d_ff = 2048;
  a.src_vocab = 37000;
  a.tgt_vocab = 37000;
  a.parameters = 1234;
  return a;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ModelFigures, ArchitectureCarriesTheConfig) {
  const std::string svg = architecture_figure(paper_like());
  EXPECT_TRUE(test::check_xml(svg).error.empty()) << test::check_xml(svg).error;
  EXPECT_TRUE(has(svg, "D = 512, 8 heads, d_ff = 2048"));
  EXPECT_TRUE(has(svg, "6 encoder + 4 decoder layers"));
  EXPECT_TRUE(has(svg, ">6 \u00d7<") && has(svg, ">4 \u00d7<"));  // the repeat counts beside the stacks
  EXPECT_TRUE(has(svg, "d_k = 64"));
  EXPECT_TRUE(has(svg, "512 \u2192 2048 \u2192 512, relu"));
  EXPECT_TRUE(has(svg, "cross-attention") && has(svg, "masked self-attention"));
  EXPECT_TRUE(has(svg, "post-norm (the paper)") && has(svg, "add &amp; LayerNorm"));
  EXPECT_TRUE(has(svg, "tied to the embedding") && has(svg, "1234 parameters"));
  // Controls: another config draws another figure.
  ArchitectureSpec pre = paper_like();
  pre.norm_first = true;
  pre.norm = "rms";
  pre.tie_output = false;
  const std::string p = architecture_figure(pre);
  EXPECT_TRUE(has(p, "pre-norm") && has(p, "RMSNorm") && !has(p, "tied to the embedding") && !has(p, "post-norm"));
  ArchitectureSpec lm = paper_like();
  lm.family = "decoder_only";
  lm.encoder_layers = 0;
  const std::string l = architecture_figure(lm);
  EXPECT_TRUE(has(l, "Decoder-only") && has(l, "4 layers") && !has(l, "cross-attention") && has(l, "masked self-attention"));
  ArchitectureSpec mlm = lm;
  mlm.family = "encoder_only";
  mlm.encoder_layers = 3;
  const std::string e = architecture_figure(mlm);
  EXPECT_TRUE(has(e, "Encoder-only") && has(e, "3 layers") && !has(e, "masked self-attention"));
}

TEST(ModelFigures, ArchitectureRejectsSpecsOfNoModel) {
  ArchitectureSpec a = paper_like();
  a.family = "mixture";
  EXPECT_THROW(architecture_figure(a), Error);
  a = paper_like();
  a.heads = 7;  // 512 is not divisible by 7
  EXPECT_THROW(architecture_figure(a), Error);
  a = paper_like();
  a.decoder_layers = 0;
  EXPECT_THROW(architecture_figure(a), Error);
}

TEST(ModelFigures, MultiHeadCarriesTheSizes) {
  MultiHeadSpec m;
  m.tokens = 9;
  m.d_model = 512;
  m.heads = 8;
  const std::string svg = multihead_figure(m);
  EXPECT_TRUE(test::check_xml(svg).error.empty()) << test::check_xml(svg).error;
  EXPECT_TRUE(has(svg, "T = 9, D = 512, H = 8, d_k = d_v = 64"));
  EXPECT_TRUE(has(svg, "W [512, 512] \u2192 [9, 512]"));
  EXPECT_TRUE(has(svg, "[9, 64] each") && has(svg, "[9, 9] per head") && has(svg, "head 8"));
  EXPECT_TRUE(has(svg, "[512, 512] \u2192 [9, 512]"));
  m.heads = 16;  // more than 8 heads: the last drawn one names the last head
  const std::string many = multihead_figure(m);
  EXPECT_TRUE(has(many, "... head 16") && !has(many, ">head 8<"));
  m.heads = 8;
  m.kv_heads = 2;  // grouped-query: K and V are narrower
  const std::string gqa = multihead_figure(m);
  EXPECT_TRUE(has(gqa, "W [512, 128] \u2192 [9, 128]") && has(gqa, "2 K/V heads, each shared by 4 query heads"));
  m.kv_heads = 3;
  EXPECT_THROW(multihead_figure(m), Error);
  m.kv_heads = 0;
  m.tokens = 0;
  EXPECT_THROW(multihead_figure(m), Error);
}

}  // namespace
}  // namespace attn::report
