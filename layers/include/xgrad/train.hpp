#pragma once
// Training utilities (namespace xgrad::train), built on xgrad::nn, xgrad::optim, xgrad::data
// and xgrad::io:
//   xgrad/train/trainer.hpp      the training loop: epochs, schedule, test evaluation, metrics
//                                files and a checkpoint every epoch, exact resume
//   xgrad/train/evaluate.hpp     classifier metrics: mean cross-entropy, accuracy, confusion matrix
//   xgrad/train/checkpoints.hpp  checkpoint paths of a run, the resume-compatibility check
//   xgrad/train/metrics.hpp      the per-epoch metrics CSV (write, read back) and its SVG chart
//   xgrad/train/progress.hpp     the terminal progress bar (plain lines in a log)
#include "xgrad/train/checkpoints.hpp"
#include "xgrad/train/evaluate.hpp"
#include "xgrad/train/metrics.hpp"
#include "xgrad/train/profile.hpp"
#include "xgrad/train/progress.hpp"
#include "xgrad/train/trainer.hpp"
