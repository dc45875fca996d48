#pragma once
// Training metrics: per epoch and per step, each a CSV log (written and read back so a resumed
// run can append to it), and an SVG chart to open in a browser: loss and accuracy per epoch on
// top, the training loss of every step and the learning rate below.
//
// Every file is written atomically: the content goes to a temporary file in the destination
// folder, which is then renamed over the destination, so a reader never sees half a file and
// an interrupted run leaves the earlier file intact.

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace xgrad::train
{
    // One row of metrics. Accuracies are fractions in [0, 1] (the chart shows percent);
    // losses are mean cross-entropy; seconds is the wall time of the epoch's training loop.
    // A value that was not measured may be NaN: the chart skips it and the CSV keeps it.
    // lr is the learning rate of the epoch's last step (NaN when unknown: a log written
    // before the column existed).
    struct epoch_metrics
    {
        int epoch = 0;
        double train_loss = 0.0;
        double train_accuracy = 0.0;
        double test_loss = 0.0;
        double test_accuracy = 0.0;
        double seconds = 0.0;
        double lr = std::numeric_limits<double>::quiet_NaN();
        /// Steps skipped for a loss or gradient that was not finite (trainer_options::
        /// on_non_finite); not in the CSV.
        std::int64_t skipped_steps = 0;
    };

    // The header line of the CSV log (without the line end). read_metrics_csv also reads logs
    // with the header before lr was added (lr then NaN).
    inline constexpr const char* metrics_csv_header =
        "epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,lr";
    inline constexpr const char* metrics_csv_header_v1 =
        "epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds";

    // One optimizer step: its epoch (from 1), its index in the epoch (from 0), the batch's
    // mean training loss and the learning rate it was taken with.
    struct step_metrics
    {
        int epoch = 0;
        std::int64_t step = 0;
        double loss = 0.0;
        double lr = 0.0;
    };

    inline constexpr const char* steps_csv_header = "epoch,step,loss,lr";

    // The per-step log, as write_metrics_csv / read_metrics_csv do the per-epoch one (epoch an
    // integer in [1, INT_MAX], step one in [0, 2^63 - 1], the same errors). It may be larger:
    // up to 1 GiB.
    void write_steps_csv(const std::filesystem::path& path, const std::vector<step_metrics>& steps);
    std::vector<step_metrics> read_steps_csv(const std::filesystem::path& path);

    // Writes the header and one row per element, in the given order, doubles with 17
    // significant digits (so they read back exactly). Throws std::runtime_error naming the
    // path when the file cannot be written (e.g. a missing folder).
    void write_metrics_csv(const std::filesystem::path& path, const std::vector<epoch_metrics>& metrics);

    // Reads a file written by write_metrics_csv; blank lines and "\r\n" line ends are
    // accepted, "nan" and "inf" read back as such. Throws std::runtime_error naming the path
    // when it cannot be opened, is not a regular file (a FIFO is refused without blocking) or
    // is over 256 MiB, and the path and line number when the header or a row is malformed
    // (wrong field count, a field that is not a number, an epoch that is not an integer in
    // [1, INT_MAX]).
    std::vector<epoch_metrics> read_metrics_csv(const std::filesystem::path& path);

    // The SVG document write_metrics_svg writes: two panels side by side (loss per epoch and
    // accuracy per epoch in percent, train and test each), axes with ticks and labels, a
    // legend, the title (XML-escaped) on top. Each series is one <path> (broken where a value
    // is not finite, absent when the series has no finite value) plus one <circle> per finite
    // point, so a single epoch still shows. Rows are drawn in epoch order. Throws
    // std::invalid_argument when a finite accuracy lies outside [0, 1].
    //
    // With steps, a second row: the training loss of every step and the learning rate, against
    // the epoch (step s of an epoch of n steps at epoch - 1 + (s + 1) / n, so the end of an
    // epoch's steps meets its point above), one path each (points are drawn only up to 60
    // steps). Steps whose epoch has no row are drawn all the same.
    std::string metrics_svg(const std::vector<epoch_metrics>& metrics, const std::string& title,
                            const std::vector<step_metrics>& steps = {});

    // Writes metrics_svg(metrics, title, steps) to path. Throws std::runtime_error naming the
    // path when the file cannot be written, std::invalid_argument (naming the path) for bad
    // metrics.
    void write_metrics_svg(const std::filesystem::path& path, const std::vector<epoch_metrics>& metrics,
                           const std::string& title, const std::vector<step_metrics>& steps = {});
}
