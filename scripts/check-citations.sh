#!/usr/bin/env bash
# Every design document a comment or a doc cites must be in the repository.
#
# Fails (exit 1, one line per finding) on:
#  - a citation of a design document outside the repository: `seed NNN`, `seed §`,
#    `the seed's`, `reference §`, `reference/<file>.md`, "the shared design folder";
#    cite `docs/spec/<file>.md#<section>` instead (docs/spec/README.md maps the old
#    names to the new places, and is the one file allowed to name them);
#  - `docs/spec/<file>.md#<anchor>` (in any tracked text file) whose file or section
#    does not exist;
#  - `docs/<path>.md` named anywhere that does not exist, or followed by a quoted section
#    title (`docs/PERFORMANCE.md, "Latency path"`) that no heading of it starts with;
#  - in Markdown, a relative link `](<file>.md#<anchor>)` or `](#<anchor>)` that does
#    not resolve.
# A section's anchor is its heading as GitHub makes it (lower case, punctuation other
# than `-` and `_` dropped, spaces to `-`), or an explicit `<a id="...">`.
#
#   scripts/check-citations.sh        checks the tree this script sits in
set -euo pipefail
cd "$(dirname "$0")/.."

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -e .git ]; then
  files=$(git ls-files -co --exclude-standard)
else
  files=$(find . -type f -not -path './target/*' -not -path './.git/*' | sed 's|^\./||')
fi

printf '%s\n' "$files" | perl -e '
use strict; use warnings; use utf8;
binmode STDOUT, ":encoding(UTF-8)"; binmode STDERR, ":encoding(UTF-8)";
my @files = grep { length && -f $_ && /\.(rs|md|sh|toml|py|c|h|txt)$/ } map { chomp; $_ } <STDIN>;
# The one file that may name the old documents (it maps them). This check and the tests
# of the checks hold the patterns and planted examples: they are not checked at all.
my %outside_ok = ("docs/spec/README.md" => 1);
@files = grep { $_ ne "scripts/check-citations.sh" && !m{^scripts/tests/} } @files;
my @outside = (
  qr/\bseeds?\s+(?:0\d\d\b|§)/i,
  qr/\bthe seed(?:\x27|\x{2019})s\b/i,
  qr/\bthe seed\s+(?:also|says|does|writes|defines|buffers|lays|measured|ran)\b/i,
  qr/\(seed:/i,
  qr/\bseed\s+(?:settings|layout|values|documents?)\b/i,
  qr/\breference\s*§/i,
  qr{\breference/[\w.-]+\.md\b},
  qr/\bshared design folder\b/i,
);
my (%anchors, @bad);
sub slug { my $s = lc shift; $s =~ s/`//g; $s =~ s/[^\w\- ]//g; $s =~ s/ /-/g; return $s }
sub anchors_of {
  my $f = shift;
  return $anchors{$f} if exists $anchors{$f};
  my %a; my %seen; my $fence = 0;
  if (open my $fh, "<:encoding(UTF-8)", $f) {
    while (my $l = <$fh>) {
      if ($l =~ /^\s*(```|~~~)/) { $fence = !$fence; next }
      next if $fence;
      if ($l =~ /^#{1,6}\s+(.*?)\s*#*\s*$/) {
        my $s = slug($1);
        my $n = $seen{$s}++;
        $a{$n ? "$s-$n" : $s} = 1;
      }
      $a{$1} = 1 while $l =~ /<a\s+(?:id|name)="([^"]+)"/g;
    }
  }
  return $anchors{$f} = \%a;
}
my %titles;
sub titles_of {
  my $f = shift;
  return $titles{$f} if exists $titles{$f};
  my @t; my $fence = 0;
  if (open my $fh, "<:encoding(UTF-8)", $f) {
    while (my $l = <$fh>) {
      if ($l =~ /^\s*(```|~~~)/) { $fence = !$fence; next }
      next if $fence;
      if ($l =~ /^#{1,6}\s+(.*?)\s*$/) { my $raw = $1; (my $h = $raw) =~ s/`//g; push @t, $h, $raw }
    }
  }
  return $titles{$f} = \@t;
}
sub check_target {
  my ($where, $text, $path, $anchor) = @_;
  if (!-f $path) { push @bad, "$where: $text: no such file"; return }
  return unless defined $anchor && length $anchor;
  return if $path !~ /\.md$/;
  my $a = anchors_of($path);
  push @bad, "$where: $text: no section \x27#$anchor\x27 in $path" unless $a->{$anchor};
}
sub norm {
  my @out;
  for my $p (split m{/}, shift) {
    if ($p eq "..") { pop @out } elsif ($p ne "." && $p ne "") { push @out, $p }
  }
  return join "/", @out;
}
for my $f (@files) {
  open my $fh, "<:encoding(UTF-8)", $f or next;
  my @lines = <$fh>;
  close $fh;
  my $dir = $f =~ m{^(.*)/} ? $1 : ".";
  my $md = $f =~ /\.md$/;
  unless ($outside_ok{$f}) {
    # The patterns may span a line break ("seed\n// §9"): search the text with each
    # comment marker of every line dropped and the lines joined by a space.
    # In source files only comments count: `(seed: u64)` is an argument.
    my $code = $f =~ /\.(?:rs|c|h)$/;
    my ($text, @starts) = ("");
    for my $l (@lines) {
      push @starts, length $text;
      my $t = $l;
      if ($code) { $t = $t =~ m{//[/!]?(.*)$} ? $1 : "" }
      $t =~ s/^\s*(?:\/\/[\/!]?|#+|\*)?\s*//;
      $t =~ s/\s*\n?$/ /;
      $text .= $t;
    }
    my %seen;
    for my $re (@outside) {
      while ($text =~ /$re/g) {
        my ($m, $at) = ($&, $-[0]);
        my $n = 0;
        $n++ while $n + 1 < @starts && $starts[$n + 1] <= $at;
        next if $seen{$n}++;
        push @bad, "$f:" . ($n + 1) . ": cites \x27$m\x27, a document that is not in the repository (cite docs/spec/<file>.md#<section>; docs/spec/README.md maps them)";
      }
    }
  }
  my $ln = 0;
  for my $l (@lines) {
    $ln++;
    my $where = "$f:$ln";
    while ($l =~ m{(?<![\w/.-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?}g) {
      check_target($where, $&, $1, $2);
    }
    while ($l =~ m{(?<![\w/.-])(docs/[\w./-]*?\.md)[,:]?\s+"([^"]+)"}g) {
      my ($path, $title) = ($1, $2);
      next unless -f $path;
      push @bad, "$where: $path, \"$title\": no section of $path starts with that title"
        unless grep { index($_, $title) == 0 } @{ titles_of($path) };
    }
    next unless $md;
    while ($l =~ m{\]\(([^)\s]*)\)}g) {
      my $t = $1;
      next if $t =~ m{^[a-z]+:}i || $t =~ m{^/};
      my ($p, $a) = $t =~ /^([^#]*)(?:#(.*))?$/;
      next if length $p && $p !~ /\.md$/;
      my $path = length $p ? norm("$dir/$p") : $f;
      check_target($where, "($t)", $path, $a);
    }
  }
}
if (@bad) {
  print "$_\n" for @bad;
  printf STDERR "error: %d citation(s) of documents or sections that are not in the repository\n", scalar @bad;
  exit 1;
}
printf "citations ok: %d files; every cited document and section is in the repository\n", scalar @files;
'
