// attn/model_figures/model_figures.h — seed 001's figures of one model folder, drawn from the
// model itself: fig 1, its architecture (from its configuration); fig 3, the scaled dot-product
// steps on its own queries, keys and values; fig 4, the multi-head flow with its sizes. This
// layer joins run (the folder, its attention) to report (the drawing), so that the run report
// and the explorer draw the same figures from the same code.
// Not here: figures of training records (run_report/), the HTTP endpoints (serve/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/models/config.h"
#include "attn/report/model_figures.h"
#include "attn/run/attention.h"
#include "attn/run/model_folder.h"

namespace attn::model_figures {

// Fig 1's numbers from a configuration (`parameters` 0: not shown).
report::ArchitectureSpec architecture_spec(const models::ModelConfig& config, int64_t parameters);
// Fig 1 of the folder's model (SVG).
std::string architecture_svg(const run::ModelFolder& folder);
// Fig 4 for `tokens` tokens through a model of this configuration (SVG).
std::string multihead_svg(const models::ModelConfig& config, int64_t tokens);

// The most tokens fig 3 draws: a longer input is cut to its first kStepsMaxTokens (one pass of
// the model over the cut input, so the figure still shows the weights the model uses for it).
inline constexpr int64_t kStepsMaxTokens = 12;

struct StepsFigure {
  run::AttentionSteps steps;  // the numbers drawn
  std::string svg;
  bool cut = false;  // the input was longer than kStepsMaxTokens
};
// Fig 3: run::attention_steps over `ids` (cut to kStepsMaxTokens) for `head`, drawn with
// `labels` (one per id; empty: positions) on the query and key axes. Errors as
// run::attention_steps, or for a label count other than the id count.
StepsFigure attention_steps_svg(const run::ModelFolder& folder, std::vector<int64_t> ids,
                                std::vector<std::string> labels, int64_t head = 0);

}  // namespace attn::model_figures
