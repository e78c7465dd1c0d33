//! The graph algorithms over a validated graph's edges: Kahn's levels (the
//! waves a plan runs in, and the cycle check) and ancestry (a repair
//! target must come before the node it repairs). Validation and planning
//! both use them.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::model::Graph;

/// Kahn's waves, each sorted; `None` when the edges hold a cycle.
///
/// For plain graph/v1, in-degrees count every edge while successors are a
/// set, as upstream counts them: two edges between the same pair of nodes
/// never drain and read as a cycle. Manifests that opt into bl's extensions
/// (where several ports between two nodes are normal) count each edge once
/// on both sides.
pub fn kahn_levels(graph: &Graph) -> Option<Vec<Vec<String>>> {
    let index: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let mut indegree = vec![0usize; graph.nodes.len()];
    let mut successors: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); graph.nodes.len()];
    for edge in &graph.edges {
        let (from, to) = (index[edge.from_node.as_str()], index[edge.to_node.as_str()]);
        let first_edge_of_pair = successors[from].insert(to);
        if first_edge_of_pair || graph.extensions.is_empty() {
            indegree[to] += 1;
        }
    }
    let mut wave: Vec<usize> = (0..graph.nodes.len())
        .filter(|&i| indegree[i] == 0)
        .collect();
    let mut levels = Vec::new();
    let mut done = 0;
    while !wave.is_empty() {
        done += wave.len();
        let mut next = Vec::new();
        for &u in &wave {
            for &v in &successors[u] {
                indegree[v] -= 1;
                if indegree[v] == 0 {
                    next.push(v);
                }
            }
        }
        let mut ids: Vec<String> = wave.iter().map(|&i| graph.nodes[i].id.clone()).collect();
        ids.sort();
        levels.push(ids);
        wave = next;
    }
    (done == graph.nodes.len()).then_some(levels)
}

/// Every node that reaches `node` through one or more edges.
pub fn ancestors<'g>(graph: &'g Graph, node: &str) -> HashSet<&'g str> {
    let mut ways_in: HashMap<&str, Vec<&'g str>> = HashMap::new();
    for e in &graph.edges {
        ways_in
            .entry(e.to_node.as_str())
            .or_default()
            .push(e.from_node.as_str());
    }
    let mut seen = HashSet::new();
    let mut stack = vec![node];
    while let Some(v) = stack.pop() {
        for &u in ways_in.get(v).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(u) {
                stack.push(u);
            }
        }
    }
    seen
}

/// Whether `ancestor` reaches `node` through one or more edges.
pub fn is_strict_ancestor(graph: &Graph, ancestor: &str, node: &str) -> bool {
    ancestors(graph, node).contains(ancestor)
}

/// One cycle in the edges, as node ids from a node back to itself (the
/// first node repeated at the end), for a refusal to name; `None` when the
/// edges are acyclic.
pub fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    let mut successors: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for e in &graph.edges {
        successors
            .entry(e.from_node.as_str())
            .or_default()
            .insert(e.to_node.as_str());
    }
    // Depth-first, with the path on a stack: a successor already on the
    // path closes a cycle.
    let mut done: HashSet<&str> = HashSet::new();
    for start in graph.nodes.iter().map(|n| n.id.as_str()) {
        if done.contains(start) {
            continue;
        }
        let mut path: Vec<&str> = vec![start];
        let mut stack = vec![
            successors
                .get(start)
                .into_iter()
                .flatten()
                .copied()
                .collect::<Vec<_>>(),
        ];
        while let Some(next) = stack.last_mut() {
            match next.pop() {
                Some(v) if path.contains(&v) => {
                    let from = path.iter().position(|n| *n == v).expect("on the path");
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|s| s.to_string()).collect();
                    cycle.push(v.to_string());
                    return Some(cycle);
                }
                Some(v) if !done.contains(v) => {
                    path.push(v);
                    stack.push(successors.get(v).into_iter().flatten().copied().collect());
                }
                Some(_) => {}
                None => {
                    stack.pop();
                    done.insert(path.pop().expect("one per frame"));
                }
            }
        }
    }
    None
}
