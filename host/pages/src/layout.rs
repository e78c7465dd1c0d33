//! Where each node of a graph goes on the page: a layered (Sugiyama)
//! layout from the rust-sugiyama crate for each connected part, and the
//! parts packed in rows. Byte-deterministic: the same graph always gives
//! the same coordinates.

/// A node's box on the page, in pixels from the top left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    pub x: f64,
    pub y: f64,
}

/// Every node's place, in the order the nodes were given, and the size of
/// the whole drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub nodes: Vec<Placed>,
    pub width: f64,
    pub height: f64,
}

pub const NODE_WIDTH: f64 = 168.0;
pub const NODE_HEIGHT: f64 = 44.0;
const MARGIN: f64 = 16.0;
const PART_GAP: f64 = 24.0;
/// The largest graph whose crossings are also cut by swapping neighbours.
const TRANSPOSE_UP_TO: usize = 100;
/// The largest graph ranked to keep its edges short.
const SHORT_EDGES_UP_TO: usize = 1000;
/// A row of parts is wrapped past this width.
const ROW_WIDTH: f64 = 1800.0;

/// Lays out `count` nodes joined by `edges` (indices into the nodes).
pub fn layout(count: usize, edges: &[(usize, usize)]) -> Layout {
    let vertices: Vec<(u32, (f64, f64))> = (0..count)
        .map(|i| (i as u32, (NODE_WIDTH, NODE_HEIGHT)))
        .collect();
    let edges: Vec<(u32, u32)> = edges
        .iter()
        .filter(|(from, to)| from != to && *from < count && *to < count)
        .map(|&(from, to)| (from as u32, to as u32))
        .collect();
    let config = rust_sugiyama::configure::Config {
        vertex_spacing: 28.0,
        // Swapping neighbours to cut crossings further costs more than the
        // rest of the layout together on a graph of hundreds of nodes.
        transpose: count <= TRANSPOSE_UP_TO,
        // Ranking to keep edges short (network simplex) grows much faster
        // than the graph: 10,000 nodes would take minutes. Above this, each
        // node goes as high as its parents let it (linear time).
        ranking_type: if count <= SHORT_EDGES_UP_TO {
            rust_sugiyama::configure::RankingType::MinimizeEdgeLength
        } else {
            rust_sugiyama::configure::RankingType::Up
        },
        ..Default::default()
    };
    let mut parts: Vec<Vec<(usize, (f64, f64))>> =
        rust_sugiyama::from_vertices_and_edges(&vertices, &edges, &config)
            .into_iter()
            .map(|(part, _, _)| part)
            .collect();
    // The parts in the order of their first node, so the page reads as
    // the manifest does.
    for part in &mut parts {
        part.sort_by_key(|(node, _)| *node);
    }
    parts.sort_by_key(|part| part.first().map_or(usize::MAX, |(node, _)| *node));
    let mut nodes = vec![
        Placed {
            x: MARGIN,
            y: MARGIN
        };
        count
    ];
    let (mut x, mut y, mut row_height, mut width) = (MARGIN, MARGIN, 0.0_f64, 0.0_f64);
    for part in parts {
        let min_x = part
            .iter()
            .map(|(_, (px, _))| *px)
            .fold(f64::INFINITY, f64::min);
        let min_y = part
            .iter()
            .map(|(_, (_, py))| *py)
            .fold(f64::INFINITY, f64::min);
        let part_width = part
            .iter()
            .map(|(_, (px, _))| px - min_x)
            .fold(0.0, f64::max)
            + NODE_WIDTH;
        let part_height = part
            .iter()
            .map(|(_, (_, py))| py - min_y)
            .fold(0.0, f64::max)
            + NODE_HEIGHT;
        if x > MARGIN && x + part_width > ROW_WIDTH {
            x = MARGIN;
            y += row_height + PART_GAP;
            row_height = 0.0;
        }
        for (node, (px, py)) in part {
            if let Some(slot) = nodes.get_mut(node) {
                *slot = Placed {
                    x: x + px - min_x,
                    y: y + py - min_y,
                };
            }
        }
        x += part_width + PART_GAP;
        width = width.max(x);
        row_height = row_height.max(part_height);
    }
    Layout {
        nodes,
        width: width.max(MARGIN * 2.0 + NODE_WIDTH),
        height: y + row_height + MARGIN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_drawn_below_its_parents_and_the_same_graph_gives_the_same_page() {
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let first = layout(5, &edges);
        assert!(first.nodes[1].y > first.nodes[0].y);
        assert!(first.nodes[3].y > first.nodes[1].y);
        assert_ne!(first.nodes[1].x, first.nodes[2].x, "siblings side by side");
        // The lone node 4 is a part of its own, beside the first.
        assert!(first.nodes[4].x > first.nodes[0].x);
        assert_eq!(first, layout(5, &edges));
    }

    #[test]
    fn many_lone_nodes_wrap_into_rows() {
        let placed = layout(40, &[]);
        let rows: std::collections::BTreeSet<u64> =
            placed.nodes.iter().map(|p| p.y as u64).collect();
        assert!(rows.len() > 1, "{rows:?}");
        assert!(placed.width <= ROW_WIDTH + NODE_WIDTH + PART_GAP);
    }
}
