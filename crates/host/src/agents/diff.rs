//! A unified-style line diff, for `install --dry-run --diff` and `uninstall --dry-run --diff`
//! (and the line counts a plain `--dry-run` gives).
//!
//! Owns nothing but the text comparison. The common head and tail are trimmed first (an
//! install touches a few lines of what may be a large `~/.claude.json`), then the middle is
//! compared with a longest-common-subsequence table, bounded so a pathological input falls
//! back to "all removed, all added" instead of using unbounded memory. Pure.

/// Lines of context around each change.
pub const CONTEXT_LINES: usize = 3;
/// Largest middle (old lines × new lines) compared line by line.
const MAX_TABLE_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Del,
    Add,
}

fn lines(s: &str) -> Vec<&str> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split_inclusive('\n').collect()
    }
}

fn edit_script<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut out: Vec<(Op, &str)> = a[..head].iter().map(|l| (Op::Same, *l)).collect();
    if am.len().saturating_mul(bm.len()) <= MAX_TABLE_CELLS {
        // lcs[i][j]: LCS length of am[i..] and bm[j..].
        let w = bm.len() + 1;
        let mut lcs = vec![0u32; (am.len() + 1) * w];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() || j < bm.len() {
            if i < am.len() && j < bm.len() && am[i] == bm[j] {
                out.push((Op::Same, am[i]));
                i += 1;
                j += 1;
            } else if i < am.len() && (j == bm.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])
            {
                // Deletions before additions, as diff(1) prints a changed line.
                out.push((Op::Del, am[i]));
                i += 1;
            } else {
                out.push((Op::Add, bm[j]));
                j += 1;
            }
        }
    } else {
        out.extend(am.iter().map(|l| (Op::Del, *l)));
        out.extend(bm.iter().map(|l| (Op::Add, *l)));
    }
    out.extend(a[a.len() - tail..].iter().map(|l| (Op::Same, *l)));
    out
}

/// The unified diff from `old` to `new` (None: the file does not exist), labelled with
/// `label`. Empty when they are equal.
pub fn unified(label: &str, old: Option<&str>, new: Option<&str>) -> String {
    if old == new {
        return String::new();
    }
    let (a, b) = (lines(old.unwrap_or("")), lines(new.unwrap_or("")));
    let script = edit_script(&a, &b);
    let mut out = format!(
        "--- {}\n+++ {}\n",
        if old.is_some() {
            format!("a/{label}")
        } else {
            "/dev/null".into()
        },
        if new.is_some() {
            format!("b/{label}")
        } else {
            "/dev/null".into()
        },
    );
    // Group changes into hunks with CONTEXT_LINES of context.
    let changed: Vec<usize> = script
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| *op != Op::Same)
        .map(|(i, _)| i)
        .collect();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT_LINES);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 2 * CONTEXT_LINES + 1 {
            end = changed[k];
            k += 1;
        }
        let end = (end + CONTEXT_LINES + 1).min(script.len());
        let (mut old_line, mut new_line) = (1, 1);
        for (op, _) in &script[..start] {
            match op {
                Op::Same => {
                    old_line += 1;
                    new_line += 1;
                }
                Op::Del => old_line += 1,
                Op::Add => new_line += 1,
            }
        }
        let hunk = &script[start..end];
        let old_n = hunk.iter().filter(|(op, _)| *op != Op::Add).count();
        let new_n = hunk.iter().filter(|(op, _)| *op != Op::Del).count();
        let at = |line: usize, n: usize| if n == 0 { line - 1 } else { line };
        out.push_str(&format!(
            "@@ -{},{old_n} +{},{new_n} @@\n",
            at(old_line, old_n),
            at(new_line, new_n)
        ));
        for (op, text) in hunk {
            out.push(match op {
                Op::Same => ' ',
                Op::Del => '-',
                Op::Add => '+',
            });
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_give_nothing() {
        assert_eq!(unified("f", Some("a\n"), Some("a\n")), "");
        assert_eq!(unified("f", None, None), "");
    }

    #[test]
    fn an_insertion_in_the_middle() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n";
        let new = "1\n2\n3\n4\nx\n5\n6\n7\n8\n";
        assert_eq!(
            unified("f", Some(old), Some(new)),
            "--- a/f\n+++ b/f\n@@ -2,6 +2,7 @@\n 2\n 3\n 4\n+x\n 5\n 6\n 7\n"
        );
    }

    #[test]
    fn created_and_deleted_files() {
        assert_eq!(
            unified("f", None, Some("a\n")),
            "--- /dev/null\n+++ b/f\n@@ -0,0 +1,1 @@\n+a\n"
        );
        assert_eq!(
            unified("f", Some("a\n"), None),
            "--- a/f\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-a\n"
        );
    }

    #[test]
    fn a_changed_line_and_a_missing_newline() {
        assert_eq!(
            unified("f", Some("a\nb"), Some("a\nc\n")),
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        );
    }

    #[test]
    fn distant_changes_make_two_hunks() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new = old.replace("2\n", "two\n").replace("19\n", "nineteen\n");
        let d = unified("f", Some(&old), Some(&new));
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
    }
}
