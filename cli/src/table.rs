//! Plain tables as kubectl prints them (its tabwriter: minimum cell width 6, padding 3):
//! columns padded to their widest cell, three spaces apart and six wide at least, the last
//! column unpadded.

const MIN_WIDTH: usize = 6;
const PADDING: usize = 3;

/// `rows[0]` is the header, if any.
pub fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|j| {
            rows.iter()
                .map(|r| r.get(j).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
                .max(MIN_WIDTH - PADDING)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(j, c)| {
                if j + 1 == r.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[j])
                }
            })
            .collect();
        out.push_str(&cells.join("   "));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_as_kubectls_tabwriter() {
        let rows: Vec<Vec<String>> = [["ID", "NAME", "X"], ["1", "a-long-name", "y"]]
            .iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect();
        assert_eq!(
            super::render(&rows),
            "ID    NAME          X\n1     a-long-name   y\n"
        );
    }
}
