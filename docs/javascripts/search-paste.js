// Pasted error lines hold characters that the search engine (lunr) reads as query syntax: a
// leading "-" means "must not contain" ("code: -98", "exitcode: -6"), "+" means "must contain",
// "~" and "^" ask for fuzzy matches and boosts, and "a:b" restricts term b to a field named a:
// a timestamp such as 09:00:12 then matches nothing at all (colons between digits become spaces). A pasted line would then exclude the
// very page that prints it. Rewrite them as spaces before the theme's search reads the box.
(function () {
  "use strict";
  var SYNTAX = /(^|\s)[-+]+(?=\S)|[~^]|(?<=\d):(?=\d)/g;
  document.addEventListener("input", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.matches("input.md-search__input")) return;
    var cleaned = box.value.replace(SYNTAX, function (match, space) {
      return typeof space === "string" ? space : " ";
    });
    if (cleaned !== box.value) box.value = cleaned;
  }, true);  // capture: before the theme's own listener on the box
})();
