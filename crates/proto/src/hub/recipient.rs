//! The `warning` of an `accepted` line (SPEC §5.1, issue 35): whether a send's `to` names
//! anyone this hub knows, said to a sender whose hello asked (`"warn":true`, SPEC §4.1).
//!
//! SPEC §3.2 queues mail for any name, on the roster or not, and that stays: an agent may
//! connect later. But a misspelt recipient (`wrker`) or an address at a peer this hub does not
//! forward to (`x@nowhere`) would otherwise be accepted in silence and wait for ever, while
//! an unknown agent at a forwarding peer bounces at once. So the sender is told, in words that
//! name the problem, suggest the nearest roster name or forwarding peer, and say the envelope
//! is queued all the same. A 004 client never asks, and a 004 client refuses an unknown key
//! in a hub line (SPEC §10.1), so the key is only ever added when asked.
//!
//! Owns the rule and its text, and the small bounded edit distance behind the suggestion, as
//! functions over what they read: the roster, the forwarding peers, the asking connection.
//! Refuses IO, and any say over routing: a warned envelope is queued exactly as before.

use super::conn_map::ConnId;
use super::conns::Conns;
use super::forward::Forwarding;
use crate::kernel::names::is_task_name;
use crate::roster::Roster;
use crate::tasks::TaskBook;
use crate::wire::HubLine;

/// The largest edit distance at which a name is offered as what the sender meant.
const MAX_SUGGEST_DISTANCE: usize = 2;

/// Who this hub knows as a recipient: its roster, the peers it forwards mail to, and (for
/// the task identities' rules, `verbs::send`) its tasks.
#[derive(Clone, Copy)]
pub(in crate::hub) struct Known<'a> {
    pub(in crate::hub) roster: &'a Roster,
    pub(in crate::hub) forwarding: Option<&'a Forwarding>,
    pub(in crate::hub) tasks: Option<&'a TaskBook>,
}

impl Known<'_> {
    /// The `accepted` line for envelope `id` sent to `to` on `conn`: with a `warning` when
    /// that connection's hello asked for one and `to` reaches nobody this hub knows.
    pub(in crate::hub) fn accepted_line(
        &self,
        conns: &Conns,
        conn: ConnId,
        id: String,
        to: &str,
    ) -> HubLine {
        let asked = conns.get(&conn).is_some_and(|c| c.warn);
        let warning = if asked {
            warning(self.roster, self.forwarding, to)
        } else {
            None
        };
        HubLine::Accepted { id, warning }
    }
}

/// Why an envelope for `to` will reach nobody this hub knows of, or None: `to` is a bare name
/// on no roster entry and no task identity, or `name@peer` where `peer` is no relay peer this
/// hub forwards mail to. (`hub` never gets here: SPEC §3.2 refuses it; nor does a task
/// identity that is not live: `task_inbox_refusal` refuses it.)
fn warning(roster: &Roster, forwarding: Option<&Forwarding>, to: &str) -> Option<String> {
    if roster.contains(to) || is_task_name(to) {
        return None;
    }
    let address = to
        .rsplit_once('@')
        .filter(|(name, peer)| !name.is_empty() && !peer.is_empty());
    let Some((name, peer)) = address else {
        let hint = match closest(to, roster.names()) {
            Some(s) => format!(" (did you mean {s:?}?)"),
            None => String::new(),
        };
        return Some(format!(
            "no agent named {to:?} is on this hub's roster{hint}; the envelope is queued for that name all the same and waits until an agent of that name connects (status with its id shows where it is)"
        ));
    };
    if forwarding.is_some_and(|f| f.forwards_to(peer)) {
        return None;
    }
    let why = if forwarding.map(Forwarding::local) == Some(peer) {
        format!(
            "{peer:?} is this hub's own relay peer id: a local agent is addressed by its name alone ({name:?})"
        )
    } else {
        let hint = match closest(peer, forwarding.into_iter().flat_map(Forwarding::peers)) {
            Some(s) => format!(" (did you mean {s:?}?)"),
            None => String::new(),
        };
        format!(
            "{peer:?} is not a relay peer this hub forwards mail to{hint}, so nothing will carry {to:?} there"
        )
    };
    Some(format!(
        "{why}; the envelope is queued under that address all the same (status with its id shows where it is)"
    ))
}

/// The candidate nearest to `word` within `MAX_SUGGEST_DISTANCE` edits (letter case aside),
/// and at most a third of the longer word's letters away, so a short name is not "corrected"
/// into an unrelated one. Ties go to the alphabetically first, so the answer does not depend
/// on a map's order.
fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let w: Vec<char> = word.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut best: Option<(usize, &'a str)> = None;
    for cand in candidates {
        let c: Vec<char> = cand.chars().map(|c| c.to_ascii_lowercase()).collect();
        let Some(d) = distance_within(&w, &c, MAX_SUGGEST_DISTANCE) else {
            continue;
        };
        if 3 * d > w.len().max(c.len()) {
            continue;
        }
        let better = match best {
            None => true,
            Some((bd, bs)) => d < bd || (d == bd && cand < bs),
        };
        if better {
            best = Some((d, cand));
        }
    }
    best.map(|(_, s)| s)
}

/// The optimal-string-alignment distance between `a` and `b` (insertions, deletions,
/// substitutions and swaps of neighbours, each 1), or None when it is over `max`. Gives up
/// as soon as two rows in a row are all over `max` (every alignment crosses one of any two
/// neighbouring rows, a swap skipping at most one), so unlike names cost a few rows each: the
/// roster may be long and `to` is the sender's choice (up to 256 bytes, SPEC §3.2).
fn distance_within(a: &[char], b: &[char], max: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let m = b.len();
    let mut before: Vec<usize> = vec![0; m + 1];
    let mut prev: Vec<usize> = (0..=m).collect();
    let mut cur: Vec<usize> = vec![0; m + 1];
    let mut prev_over = false;
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=m {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        let over = cur.iter().all(|&d| d > max);
        if over && prev_over {
            return None;
        }
        prev_over = over;
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    Some(prev[m]).filter(|&d| d <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(a: &str, b: &str) -> Option<usize> {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        distance_within(&a, &b, 2)
    }

    /// The distance against a plain full-table computation on every pair of a small
    /// alphabet's words up to four letters: the early exit never changes an answer.
    #[test]
    fn the_bounded_distance_is_the_full_one_within_the_bound() {
        fn full(a: &[char], b: &[char]) -> usize {
            let (n, m) = (a.len(), b.len());
            let mut t = vec![vec![0usize; m + 1]; n + 1];
            for (i, row) in t.iter_mut().enumerate() {
                row[0] = i;
            }
            for (j, cell) in t[0].iter_mut().enumerate() {
                *cell = j;
            }
            for i in 1..=n {
                for j in 1..=m {
                    let cost = usize::from(a[i - 1] != b[j - 1]);
                    let mut d = (t[i - 1][j] + 1)
                        .min(t[i][j - 1] + 1)
                        .min(t[i - 1][j - 1] + cost);
                    if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                        d = d.min(t[i - 2][j - 2] + 1);
                    }
                    t[i][j] = d;
                }
            }
            t[n][m]
        }
        let mut words: Vec<Vec<char>> = vec![vec![]];
        for len in 1..=4 {
            let mut next = Vec::new();
            for w in words.iter().filter(|w| w.len() == len - 1) {
                for c in ['a', 'b', 'c'] {
                    let mut v = w.clone();
                    v.push(c);
                    next.push(v);
                }
            }
            words.extend(next);
        }
        for a in &words {
            for b in &words {
                let want = Some(full(a, b)).filter(|&d| d <= 2);
                assert_eq!(distance_within(a, b, 2), want, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn distances_of_common_typos() {
        assert_eq!(dist("wrker", "worker"), Some(1));
        assert_eq!(dist("wokrer", "worker"), Some(1), "a swap is one edit");
        assert_eq!(dist("orchestrater", "orchestrator"), Some(1));
        assert_eq!(dist("worker", "orchestrator"), None);
        assert_eq!(dist(&"x".repeat(256), &"y".repeat(255)), None);
    }

    #[test]
    fn the_suggestion_is_near_unambiguous_and_ignores_letter_case() {
        let roster = ["orchestrator", "reviewer", "worker", "worker2"];
        assert_eq!(closest("wrker", roster), Some("worker"));
        assert_eq!(closest("Worker", roster), Some("worker"));
        assert_eq!(closest("reveiwer", roster), Some("reviewer"));
        assert_eq!(closest("zebra", roster), None);
        // Short names: one letter off in three is too far to guess.
        assert_eq!(closest("bob", ["rob"]), Some("rob"));
        assert_eq!(closest("ab", ["cd", "xy"]), None);
        assert_eq!(closest("a", ["b"]), None);
        // A tie goes to the alphabetically first, whatever the order given.
        assert_eq!(closest("worke", ["worker", "workx"]), Some("worker"));
        assert_eq!(closest("worke", ["workx", "worker"]), Some("worker"));
    }
}
