// Learning-rate schedules (paper §5.3, Eq. 3, and the common warmup + constant / cosine).
// Pure functions of the step number: no state, so resuming a run needs only the step.
// Not here: anything that depends on the loss or on wall time.
#include "attn/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "attn/core/error.h"

namespace attn::train {

namespace {

void check_step(int64_t step, const char* op) {
  ATTN_CHECK(step >= 1, op, "steps count from 1, got ", step);
}

// Linear warmup factor min(1, step / warmup); 1 when there is no warmup.
double warmup_factor(int64_t step, int64_t warmup) {
  if (warmup <= 0 || step >= warmup) return 1.0;
  return static_cast<double>(step) / static_cast<double>(warmup);
}

bool positive_finite(double x) { return std::isfinite(x) && x > 0.0; }

}  // namespace

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Noam: return "noam";
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Cosine: return "cosine";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::Noam, ScheduleKind::Constant, ScheduleKind::Cosine})
    if (name == schedule_kind_name(k)) return k;
  fail("schedule", "unknown schedule '", name, "' (expected noam, constant or cosine)");
}

NoamSchedule::NoamSchedule(int64_t d_model, int64_t warmup_steps, double scale)
    : d_model_(d_model), warmup_(warmup_steps), scale_(scale) {
  ATTN_CHECK(d_model >= 1, "noam schedule", "d_model must be >= 1, got ", d_model);
  ATTN_CHECK(warmup_steps >= 1, "noam schedule", "warmup_steps must be >= 1, got ", warmup_steps);
  ATTN_CHECK(positive_finite(scale), "noam schedule", "scale must be > 0, got ", scale);
}

double NoamSchedule::lr(int64_t step) const {
  check_step(step, "noam schedule");
  const double s = static_cast<double>(step);
  const double w = static_cast<double>(warmup_);
  return scale_ / std::sqrt(static_cast<double>(d_model_)) *
         std::min(1.0 / std::sqrt(s), s * std::pow(w, -1.5));
}

std::string NoamSchedule::describe() const {
  return str_cat("noam(d_model=", d_model_, ", warmup=", warmup_, ", scale=", scale_, ")");
}

ConstantSchedule::ConstantSchedule(double lr, int64_t warmup_steps) : lr_(lr), warmup_(warmup_steps) {
  ATTN_CHECK(positive_finite(lr), "constant schedule", "lr must be > 0, got ", lr);
  ATTN_CHECK(warmup_steps >= 0, "constant schedule", "warmup_steps must be >= 0, got ", warmup_steps);
}

double ConstantSchedule::lr(int64_t step) const {
  check_step(step, "constant schedule");
  return lr_ * warmup_factor(step, warmup_);
}

std::string ConstantSchedule::describe() const {
  return str_cat("constant(lr=", lr_, ", warmup=", warmup_, ")");
}

CosineSchedule::CosineSchedule(double lr, double min_lr, int64_t warmup_steps, int64_t total_steps)
    : lr_(lr), min_lr_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  ATTN_CHECK(positive_finite(lr), "cosine schedule", "lr must be > 0, got ", lr);
  ATTN_CHECK(std::isfinite(min_lr) && min_lr >= 0.0 && min_lr <= lr, "cosine schedule",
             "min_lr must be in [0, lr = ", lr, "], got ", min_lr);
  ATTN_CHECK(warmup_steps >= 0, "cosine schedule", "warmup_steps must be >= 0, got ", warmup_steps);
  ATTN_CHECK(total_steps > warmup_steps, "cosine schedule", "total_steps (", total_steps,
             ") must exceed warmup_steps (", warmup_steps, ")");
}

double CosineSchedule::lr(int64_t step) const {
  check_step(step, "cosine schedule");
  if (step < warmup_) return lr_ * warmup_factor(step, warmup_);
  const double t = std::clamp(static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_),
                              0.0, 1.0);
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

std::string CosineSchedule::describe() const {
  return str_cat("cosine(lr=", lr_, ", min_lr=", min_lr_, ", warmup=", warmup_, ", total=", total_, ")");
}

std::unique_ptr<LrSchedule> make_schedule(const ScheduleConfig& c) {
  switch (c.kind) {
    case ScheduleKind::Noam: return std::make_unique<NoamSchedule>(c.d_model, c.warmup_steps, c.scale);
    case ScheduleKind::Constant: return std::make_unique<ConstantSchedule>(c.lr, c.warmup_steps);
    case ScheduleKind::Cosine:
      return std::make_unique<CosineSchedule>(c.lr, c.min_lr, c.warmup_steps, c.total_steps);
  }
  fail("schedule", "invalid schedule kind ", static_cast<int>(c.kind));
}

}  // namespace attn::train
