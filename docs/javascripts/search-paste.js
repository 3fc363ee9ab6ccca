// Pasted error lines hold characters that the search engine (lunr) reads as query syntax: a
// leading "-" means "must not contain" ("code: -98", "exitcode: -6"), "+" means "must contain",
// "~" and "^" ask for fuzzy matches and boosts, and a colon makes the word before it a field
// name: in the "name: number" pairs logs are full of ("exitcode: -9", "local_rank: 0", "pid:
// 4188", a timestamp's 09:00:12) the names that say what failed are lost, and a line that ends
// in a colon ("...ChildFailedError:") is a field with no term, which finds nothing. A pasted line would
// then miss, or exclude, the very page that prints it; a word cut after a hyphen ("/dev/shm/nccl-")
// found nothing at all. Rewrite them as spaces before the theme's
// search reads the box. (A colon before a word is left alone: as a field query it drops only
// the word before it, and such lines rank better that way than with every word.)
(function () {
  "use strict";
  var SYNTAX = /(^|\s)[-+]+(?=\S)|(\S)[-+]+(?=\s|$)|[~^]|:(?=\s*(?:[-+]?\d|$))/g;
  // A timestamp names when, never what failed; its numbers only match the dates on unrelated
  // pages (a review date 2026-12-03 outranked the Slurm page for "... AT 2025-03-01T09:00:12 ...").
  var STAMP = /\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}[: ]\d{2}(?:[: ]\d{2}(?:[.,]\d+)?)?)?\b/g;
  document.addEventListener("input", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.matches("input.md-search__input")) return;
    var cleaned = box.value.replace(STAMP, " ").replace(SYNTAX, function (match, space, word) {
      if (typeof space === "string") return space;
      return typeof word === "string" ? word + " " : " ";  // a trailing "-": "/dev/shm/nccl-"
    });
    if (cleaned !== box.value) box.value = cleaned;
  }, true);  // capture: before the theme's own listener on the box
})();
