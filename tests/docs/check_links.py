#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown files resolves: the file exists and, for a
'#anchor' into a Markdown file, a heading there has that GitHub-style slug. External links (scheme:...) are
not fetched. Usage: check_links.py REPOSITORY_ROOT [FILE.md ...]; exit status 1 lists each broken link."""
import os
import re
import subprocess
import sys

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose_lines(path):
    """Lines outside fenced code blocks."""
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                in_code = not in_code
                continue
            if not in_code:
                yield line


def slug(title):
    text = re.sub(r"`([^`]*)`", r"\1", title)           # code spans keep their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for line in prose_lines(path):
            m = HEADING.match(line)
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else f"{s}-{n}")
        cache[path] = out
    return cache[path]


def markdown_files(root):
    listed = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "*.md"],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [os.path.join(root, p) for p in listed.stdout.split()]
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".md")]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1])
    files = [os.path.abspath(p) for p in argv[2:]] or markdown_files(root)
    broken, total = [], 0
    for f in sorted(files):
        for line in prose_lines(f):
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                target = m.group(1)
                if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):
                    continue
                total += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                rel = os.path.relpath(f, root)
                if not os.path.exists(dest):
                    broken.append(f"{rel}: {target}: no such file")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    broken.append(f"{rel}: {target}: no heading with that anchor")
    for b in broken:
        print(b)
    print(f"{total} relative links in {len(files)} Markdown files, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
