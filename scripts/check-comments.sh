#!/usr/bin/env bash
# Code comments say what the code must keep true, not what it cost last week: no
# instruction counts and no session history in the comments of `*.rs` files. Those live
# in docs/PERFORMANCE.md and docs/HISTORY.md; a comment may point there
# ("docs/PERFORMANCE.md, \"Inlining\"").
#
# Fails (exit 1, one line per finding) on a comment (`//`, `///`, `//!`) that holds:
#  - an instruction count: a number before "instruction(s)" ("3 instructions",
#    "~40 instructions", "16-instruction", "one instruction"), "instructions
#    more/fewer/instead", or "instruction counts unchanged/rose/...";
#  - session history: "<ordinal|this|last|...> session", "session N", "before/since/
#    until issue N", "before 0.2" (a version), "used to be(come)", "(was N ...)", a
#    date (2026-11-28), a commit hash after "commit/before/after/since".
# Words that only look alike pass: a barrier "instruction", "emits no instruction", a
# tool that counts "instructions per call", a CQE "compressed session", "issue 23" as a
# reference to what a test guards.
#
#   scripts/check-comments.sh        checks the tree this script sits in
set -euo pipefail
cd "$(dirname "$0")/.."

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -e .git ]; then
  files=$(git ls-files -co --exclude-standard -- '*.rs')
else
  files=$(find . -name '*.rs' -not -path './target/*' -not -path './.git/*' | sed 's|^\./||')
fi

printf '%s\n' "$files" | perl -e '
use strict; use warnings; use utf8;
binmode STDOUT, ":encoding(UTF-8)"; binmode STDERR, ":encoding(UTF-8)";
my @files = grep { length && -f $_ } map { chomp; $_ } <STDIN>;
my $num = qr/(?<![\w.])[~+\x{2212}-]?\d+(?:[.,]\d+)?/;
my $ord = qr/(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|\d+(?:st|nd|rd|th)|last|previous|earlier|this|next)/i;
my @rules = (
  ["instruction count", qr/$num(?:\s+|-)instructions?\b/i],
  ["instruction count", qr/\binstructions?\s+(?:more|fewer|less|extra|saved|instead)\b/i],
  ["instruction count", qr/\b(?:one|two|three|four|five|six|seven|eight|nine|ten|a dozen)\s+instructions?\b/i],
  ["instruction count", qr/\binstruction\s+counts?\s+(?:unchanged|rose|fell|dropped|went|grew|were|was|up|down)\b/i],
  ["session history", qr/\b$ord\s+session\b/i],
  ["session history", qr/\bsession\s+\d+\b/i],
  ["session history", qr/\b(?:before|since|until|after|as of)\s+issue\s+\d+\b/i],
  ["session history", qr/\b(?:before|since|until|as of)\s+(?:v|version\s+)?\d+\.\d+\b/i],
  ["session history", qr/\bused to be(?:come)?\b/i],
  ["session history", qr/\(was\s+[~+\x{2212}-]?\d/i],
  ["session history", qr/\b20\d\d-[01]\d-[0-3]\d\b/],
  ["session history", qr/\b(?:commit|before|after|since)\s+(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b/],
);
my @bad;
for my $f (@files) {
  open my $fh, "<:encoding(UTF-8)", $f or next;
  while (my $l = <$fh>) {
    # The comment part: after the first `//` outside a simple string literal.
    (my $code = $l) =~ s/"(?:[^"\\]|\\.)*"/""/g;
    next unless $code =~ m{//(.*)$};
    my $c = $1;
    for my $r (@rules) {
      if ($c =~ $r->[1]) {
        push @bad, "$f:$.: $r->[0] in a comment (\x27$&\x27): move it to docs/PERFORMANCE.md or docs/HISTORY.md";
        last;
      }
    }
  }
}
if (@bad) {
  print "$_\n" for @bad;
  printf STDERR "error: %d comment(s) with instruction counts or session history\n", scalar @bad;
  exit 1;
}
printf "comments ok: %d .rs files, no instruction counts or session history\n", scalar @files;
'
