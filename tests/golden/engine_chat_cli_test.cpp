// `rackserve chat` driven non-interactively: stdin piped, the embedded default model, greedy.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

struct ChatRun {
  int rc = -1;
  std::string out, err;
};

ChatRun run_chat(const std::string& input, const std::string& args = "--temperature 0 --max-tokens 6") {
  static int counter = 0;
  const std::string base = "/tmp/rs_chat_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  {
    std::ofstream(base + ".in") << input;
  }
  const std::string cmd = std::string("'") + RS_BINARY + "' chat --device cpu --threads 2 " +
                          args + " < " + base + ".in > " + base + ".out 2> " + base + ".err";
  ChatRun r;
  int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  for (const char* ext : {".in", ".out", ".err"}) std::remove((base + ext).c_str());
  return r;
}

int count_stats_lines(const std::string& err) {
  static const std::regex line(R"(\[time to first token \d+\.\d{3} s, (\d+\.\d|n/a) tokens/s, \d+ tokens, finish: (stop|length)\])");
  return static_cast<int>(std::distance(std::sregex_iterator(err.begin(), err.end(), line), std::sregex_iterator()));
}

}  // namespace

TEST_SUITE("golden.engine") {

TEST_CASE("chat CLI: streams one answer per message with a timing line, /reset forgets, /exit quits") {
  ChatRun a = run_chat("Hi\n/exit\nnot sent\n");
  REQUIRE_MESSAGE(a.rc == 0, a.err);
  CHECK(count_stats_lines(a.err) == 1);
  CHECK(a.err.find("RANDOM") != std::string::npos);  // the banner says the default model is random
  CHECK_FALSE(a.out.empty());

  // After /reset the conversation is the same as a fresh one, so greedy gives the same answer.
  ChatRun b = run_chat("Tell me something\n/reset\nHi\n");
  REQUIRE_MESSAGE(b.rc == 0, b.err);
  CHECK(count_stats_lines(b.err) == 2);
  CHECK(b.err.find("(conversation reset)") != std::string::npos);
  REQUIRE(b.out.size() >= a.out.size());
  CHECK(b.out.substr(b.out.size() - a.out.size()) == a.out);
}

TEST_CASE("chat CLI: a line ending in a backslash continues the message") {
  ChatRun r = run_chat("first line\\\nsecond line\\\nthird line\n/exit\n");
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(count_stats_lines(r.err) == 1);
}

TEST_CASE("chat CLI: bad options are clear errors") {
  ChatRun r = run_chat("", "--max-tokens 0");
  CHECK(r.rc != 0);
  CHECK(r.err.find("--max-tokens must be at least 1") != std::string::npos);
  r = run_chat("", "--load-format pickle");
  CHECK(r.rc != 0);
  CHECK(r.err.find("--load-format") != std::string::npos);
}

}
