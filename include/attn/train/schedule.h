// attn/train/schedule.h — learning-rate schedules: the paper's "Noam" rate (§5.3, Eq. 3),
// a constant rate after linear warmup, and cosine decay after linear warmup.
// Steps count from 1, the first optimizer update (step 0 is an error, unlike the Annotated
// Transformer's rate(), which maps it to 1). Not here: the optimizer (adam.h), restarts,
// or schedules that look at the loss (plateau).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace attn::train {

enum class ScheduleKind { Noam, Constant, Cosine };

// "noam", "constant", "cosine"; parsing any other name is an error listing these.
const char* schedule_kind_name(ScheduleKind kind);
ScheduleKind parse_schedule_kind(const std::string& name);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::Noam;
  // Noam: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).
  int64_t d_model = 512;  // >= 1 (Noam only)
  double scale = 1.0;     // > 0 (Noam only)
  // Linear warmup length: >= 1 for Noam; >= 0 for constant and cosine (0 = none).
  int64_t warmup_steps = 4000;
  // Constant and cosine: the rate reached at the end of warmup (> 0).
  double lr = 1e-3;
  // Cosine: the rate falls from lr to min_lr (0 <= min_lr <= lr) between warmup_steps and
  // total_steps (> warmup_steps), and stays at min_lr after.
  double min_lr = 0.0;
  int64_t total_steps = 0;
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The learning rate for optimizer step `step` (>= 1).
  virtual double lr(int64_t step) const = 0;
  // One line for logs, e.g. "noam(d_model=64, warmup=400, scale=1)".
  virtual std::string describe() const = 0;
};

// lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5): linear growth for
// `warmup` steps, peak scale * (d_model * warmup)^-0.5 at step == warmup, then step^-0.5 decay.
class NoamSchedule final : public LrSchedule {
 public:
  NoamSchedule(int64_t d_model, int64_t warmup_steps, double scale = 1.0);
  double lr(int64_t step) const override;
  std::string describe() const override;

 private:
  int64_t d_model_, warmup_;
  double scale_;
};

// lr * min(1, step / warmup): linear warmup, then constant.
class ConstantSchedule final : public LrSchedule {
 public:
  ConstantSchedule(double lr, int64_t warmup_steps);
  double lr(int64_t step) const override;
  std::string describe() const override;

 private:
  double lr_;
  int64_t warmup_;
};

// Linear warmup to lr, then min_lr + (lr - min_lr) * (1 + cos(pi * t)) / 2 with
// t = (step - warmup) / (total - warmup) clamped to [0, 1].
class CosineSchedule final : public LrSchedule {
 public:
  CosineSchedule(double lr, double min_lr, int64_t warmup_steps, int64_t total_steps);
  double lr(int64_t step) const override;
  std::string describe() const override;

 private:
  double lr_, min_lr_;
  int64_t warmup_, total_;
};

// The schedule the config describes; invalid values are an error naming the field.
std::unique_ptr<LrSchedule> make_schedule(const ScheduleConfig& config);

}  // namespace attn::train
