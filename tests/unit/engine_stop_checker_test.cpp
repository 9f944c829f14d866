#include <doctest/doctest.h>

#include "engine/stop_checker.h"

using rs::StopChecker;

TEST_SUITE("unit.engine") {

TEST_CASE("stop checker: text passes through when there are no stop strings") {
  StopChecker s({}, false);
  CHECK(s.push("abc") == "abc");
  CHECK(s.flush().empty());
  CHECK_FALSE(s.matched());
}

TEST_CASE("stop checker: a stop string split across tokens is withheld and cut") {
  StopChecker s({"END"}, false);
  std::string out;
  out += s.push("hello E");
  CHECK(out == "hello");  // "E" might start "END"
  out += s.push("N");
  CHECK(out == "hello ");  // " " can no longer be part of "END"; "EN" still can
  out += s.push("D and more");
  CHECK(s.matched());
  CHECK(out == "hello ");
  CHECK(s.push("later").empty());
}

TEST_CASE("stop checker: include_stop_str_in_output keeps the stop string") {
  StopChecker s({"\n\n"}, true);
  std::string out = s.push("a\n");
  out += s.push("\nb");
  CHECK(s.matched());
  CHECK(out == "a\n\n");
}

TEST_CASE("stop checker: a false start is released once it cannot be a stop string") {
  StopChecker s({"abc"}, false);
  std::string out = s.push("xab");
  CHECK(out == "x");
  out += s.push("d");
  CHECK(out == "xa");  // the last max_len - 1 bytes are always held back
  out += s.flush();
  CHECK(out == "xabd");
  CHECK_FALSE(s.matched());
}

TEST_CASE("stop checker: the earliest of several stop strings wins") {
  StopChecker s({"cd", "bcx", "b"}, false);
  CHECK(s.push("abcd") == "a");
  CHECK(s.matched());
}

TEST_CASE("stop checker: withheld text is never cut inside a UTF-8 character") {
  StopChecker s({"zz"}, false);
  // "é" is two bytes; withholding one byte must hold back the whole character.
  std::string out = s.push("a\xC3\xA9");
  CHECK(out == "a");
  out += s.push("b");
  CHECK(out == "a\xC3\xA9");
  out += s.flush();
  CHECK(out == "a\xC3\xA9" "b");
}

}
