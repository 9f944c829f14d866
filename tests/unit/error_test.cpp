#include <doctest/doctest.h>

#include "common/error.h"

TEST_SUITE("unit.error") {
TEST_CASE("Error keeps the user message and the source location apart") {
  rs::Error e("model.safetensors: tensor x: truncated");
  CHECK(std::string(e.what()) == "model.safetensors: tensor x: truncated");
  CHECK(e.where().find("error_test.cpp:") != std::string::npos);
}
}
