// The Jinja subset: semantics that chat templates rely on, whitespace control as transformers
// configures it, errors with line:column, and the sandbox bounds.
#include <doctest/doctest.h>

#include <chrono>

#include "common/error.h"
#include "tokenizer/chat_template.h"

namespace {
std::string render(const std::string& src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return rs::ChatTemplate(src).render(ctx);
}
}  // namespace

TEST_SUITE("unit.jinja") {
  TEST_CASE("expressions follow Python") {
    CHECK(render("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}") == "7|3|-4|1|3.5|1024");
    CHECK(render("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}") == "a1None|abab|[1, 2]");
    CHECK(render("{{ x }}|{{ none }}|{{ true }}|{{ 1.0 }}|{{ 0.1 }}|{{ {'a': 'b'} }}") == "|None|True|1.0|0.1|{'a': 'b'}");
    CHECK(render("{{ 'x' if a else 'y' }}{{ 'z' if b }}", {{"a", false}, {"b", false}}) == "y");
    CHECK(render("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}") == "TrueTrueTrueTrue");
    CHECK(render("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-1] }}|{{ l[-1] }}|{{ l[5] is defined }}", {{"s", "héllo"}, {"l", {1, 2, 3}}}) ==
          "olléh|él|o|3|False");
    CHECK(render("{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ not 0 }}{{ [] or 'e' }}{{ 1 and 2 }}") == "TrueTrueTrue" "e2");
  }

  TEST_CASE("statements: if/elif/else, for with loop.*, set, namespace, macros, break/continue") {
    CHECK(render("{% if a %}A{% elif b %}B{% else %}C{% endif %}", {{"a", 0}, {"b", 1}}) == "B");
    CHECK(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}",
                 {{"xs", {"a", "b"}}}) == "10TrueFalse22;21FalseTrue21;");
    CHECK(render("{% for x in [] %}no{% else %}empty{% endfor %}") == "empty");
    CHECK(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {{"d", {{"z", 1}, {"a", 2}}}}) == "z=1,a=2,");
    CHECK(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %}") == "24");
    CHECK(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}") == "13");
    CHECK(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}") == "1");
    CHECK(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "3");
    CHECK(render("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('a') }}/{{ greet('b', p='Yo') }}") == "Hi a/Yo b");
    CHECK(render("{% set t %}x{{ 1 }}{% endset %}{{ t }}") == "x1");
    CHECK(render("{% raw %}{{ not rendered }}{% endraw %}") == "{{ not rendered }}");
    CHECK(render("{% filter upper %}abc{% endfilter %}") == "ABC");
  }

  TEST_CASE("filters, tests and string methods used by chat templates") {
    CHECK(render("{{ '  a b  ' | trim }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b'.split(',') }}|{{ ' a  b '.split() }}") == "a b|a|['a', 'b']|['a', 'b']");
    CHECK(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'aXa'.replace('a', 'b') }}{{ 'Ab'.upper() }}{{ 'Ab' | lower }}") ==
          "TrueTruebXbABab");
    CHECK(render("{{ [1, 2] | length }}{{ 'héllo' | length }}{{ x | default('d') }}{{ '' | default('e', true) }}") == "25de");
    CHECK(render("{{ ['a', 'b'] | join('-') }}|{{ [3, 1, 2] | sort | first }}|{{ [3, 1, 2] | last }}|{{ [1, 1, 2] | unique | list }}") == "a-b|1|2|[1, 2]");
    CHECK(render("{{ v | tojson }}", {{"v", {{"b", 1}, {"a", {true, nullptr, 1.5, "é\"\n"}}}}}) == R"({"b": 1, "a": [true, null, 1.5, "é\"\n"]})");
    CHECK(render("{{ v | tojson(indent=2) }}", {{"v", {{"a", {1}}}}}) == "{\n  \"a\": [\n    1\n  ]\n}");
    CHECK(render("{{ xs | map(attribute='n') | join(',') }}|{{ xs | selectattr('n', 'equalto', 2) | list | length }}",
                 {{"xs", {{{"n", 1}}, {{"n", 2}}}}}) == "1,2|1");
    CHECK(render("{{ x is none }}{{ y is defined }}{{ 's' is string }}{{ 3 is number }}{{ {} is mapping }}{{ 4 is divisibleby(2) }}",
                 {{"x", nullptr}}) == "TrueFalseTrueTrueTrueTrue");
    CHECK(render("{{ d.get('a') }}{{ d.get('z', 0) }}{{ d['a'] }}{{ d.a }}{{ d.missing is defined }}", {{"d", {{"a", 1}}}}) == "1011False");
  }

  TEST_CASE("whitespace control: trim_blocks, lstrip_blocks, -, +") {
    CHECK(render("{% if true %}\nA\n{% endif %}\nB") == "A\nB");
    CHECK(render("  {% if true %}x{% endif %}") == "x");
    CHECK(render("a  {%- if true -%}  b  {%- endif %}") == "ab");
    CHECK(render("a {{- ' b ' -}} c") == "a b c");
    CHECK(render("  {%+ if true %}x{% endif %}") == "  x");
    CHECK(render("{% if true +%}\nx{% endif %}") == "\nx");
    CHECK(render("x {# comment #}\ny") == "x y");
    CHECK(render("{{ 'a' }}\n{{ 'b' }}") == "a\nb");
  }

  TEST_CASE("errors carry line and column") {
    CHECK_THROWS_WITH_AS(rs::ChatTemplate("ok\n{% if %}"), doctest::Contains("line 2 column"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::ChatTemplate("{% for x in xs %}never closed"), doctest::Contains("endfor"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::ChatTemplate("{{ 'unterminated }}"), doctest::Contains("line 1 column 4"), rs::Error);
    CHECK_THROWS_WITH_AS(rs::ChatTemplate("{% frobnicate %}"), doctest::Contains("unknown statement"), rs::Error);
    CHECK_THROWS_WITH_AS(render("\n\n  {{ 'a' + 1 }}"), doctest::Contains("line 3 column"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{{ x.y }}"), doctest::Contains("undefined"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{{ 'a' in none }}"), doctest::Contains("not iterable"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{{ x | nosuchfilter }}"), doctest::Contains("unknown filter"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{{ raise_exception('Only user and assistant roles') }}"), "Only user and assistant roles", rs::Error);
  }

  TEST_CASE("sandbox: no environment, bounded loops, recursion and output") {
    CHECK(render("{{ env }}{{ os }}{{ self }}") == "");
    CHECK_THROWS_WITH_AS(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
                         doctest::Contains("steps"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{{ range(1000000000) }}"), doctest::Contains("sandbox limit"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), doctest::Contains("nested deeper"), rs::Error);
    CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 1000 %}{% for i in range(100000) %}{{ s }}{% endfor %}"), doctest::Contains("output exceeds"),
                         rs::Error);
    CHECK_THROWS_WITH_AS(rs::ChatTemplate("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), doctest::Contains("nested too deeply"),
                         rs::Error);
    CHECK_THROWS_AS(render("{% set ns = 1 %}{% set ns.x = 2 %}"), rs::Error);
  }

  TEST_CASE("strftime_now uses the fixed clock when set") {
    rs::ChatTemplate::set_fixed_now(std::time_t{1700000000});  // 2023-11-14 UTC
    setenv("TZ", "UTC", 1);
    tzset();
    CHECK(render("{{ strftime_now('%d %b %Y') }}") == "14 Nov 2023");
    rs::ChatTemplate::set_fixed_now(std::nullopt);
  }
}
