// The recording of the configurations a model runs, which tune() profiles:
// while on, every configuration reaching the overrides is recorded (and runs
// as it would otherwise).
#pragma once

#include "base/conv_key.h"

#include <string>
#include <vector>

namespace torch_cudnn_algo {

// Turning it on clears the record. The caller (the ops) then
// (de)registers the overrides: recording needs every direction's calls.
void set_config_recording(bool enabled);
bool config_recording();
void record_config(const ConvKey& key);
// The recorded configurations, each as json_request() describes it, in the
// order they were first met.
std::vector<std::string> recorded_configs();

}  // namespace torch_cudnn_algo
