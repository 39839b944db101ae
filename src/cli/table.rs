//! Every list the CLI prints for people: a header, then one row per item, each column
//! as wide as its widest cell. A cell may carry a colour (a status), drawn only when the
//! output is a terminal that wants it; piped, a table is plain text that `awk` and
//! `column` read.

use anstyle::Style;
use std::io::{IsTerminal, Write};

/// Whether stdout is a terminal that wants colour (`NO_COLOR` unset or empty).
pub fn colour_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Rows under a header, written aligned.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Row>,
}

struct Row {
    cells: Vec<String>,
    /// Which cell is coloured, and how.
    style: Option<(usize, Style)>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        Table {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// A row of plain cells, one per column.
    pub fn push(&mut self, cells: Vec<String>) {
        self.push_styled(cells, None);
    }

    /// A row whose cell `column` is drawn in `style` on a terminal.
    pub fn push_styled(&mut self, cells: Vec<String>, style: Option<(usize, Style)>) {
        debug_assert_eq!(cells.len(), self.header.len(), "one cell per column");
        // What a task's command or a name holds is the user's: a newline or an escape
        // code in it must not break the table or drive the terminal.
        let cells = cells.into_iter().map(|c| printable(&c)).collect();
        self.rows.push(Row { cells, style });
    }

    /// Writes the header and the rows; colours only with `colour`.
    pub fn write(&self, out: &mut impl Write, colour: bool) -> std::io::Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(&row.cells) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        line(out, &header, &widths, None)?;
        for row in &self.rows {
            line(out, &row.cells, &widths, row.style.filter(|_| colour))?;
        }
        Ok(())
    }
}

fn line(
    out: &mut impl Write,
    cells: &[String],
    widths: &[usize],
    style: Option<(usize, Style)>,
) -> std::io::Result<()> {
    let mut text = String::new();
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        let last = i + 1 == cells.len();
        // The padding stays outside the colour, and the escape codes take no room on the
        // screen: the columns line up either way.
        let pad = if last {
            0
        } else {
            width - cell.chars().count() + 2
        };
        match style {
            Some((column, style)) if column == i => {
                text.push_str(&format!("{}{cell}{}", style.render(), style.render_reset()));
            }
            _ => text.push_str(cell),
        }
        text.push_str(&" ".repeat(pad));
    }
    writeln!(out, "{}", text.trim_end())
}

/// The cell with its control characters written as escapes.
pub fn printable(cell: &str) -> String {
    if !cell.chars().any(char::is_control) {
        return cell.to_string();
    }
    cell.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anstyle::AnsiColor;

    fn written(table: &Table, colour: bool) -> String {
        let mut out = Vec::new();
        table.write(&mut out, colour).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn columns_line_up_under_the_header() {
        let mut table = Table::new(&["NAME", "STATE", "DEPTH"]);
        table.push(vec![
            "a-much-longer-name".into(),
            "active".into(),
            "3".into(),
        ]);
        table.push(vec!["q".into(), "paused".into(), "12".into()]);
        let text = written(&table, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let column = |needle: &str, line: &str| line.find(needle).unwrap();
        assert_eq!(column("STATE", lines[0]), column("active", lines[1]));
        assert_eq!(column("STATE", lines[0]), column("paused", lines[2]));
        assert_eq!(column("DEPTH", lines[0]), column("12", lines[2]));
        assert!(lines.iter().all(|l| !l.ends_with(' ')), "{text:?}");
    }

    #[test]
    fn only_the_styled_cell_is_coloured_and_only_when_asked() {
        let style = Style::new().fg_color(Some(AnsiColor::Red.into()));
        let mut table = Table::new(&["ID", "STATUS", "QUEUE"]);
        table.push_styled(
            vec!["abc".into(), "failed".into(), "q".into()],
            Some((1, style)),
        );
        let plain = written(&table, false);
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        let coloured = written(&table, true);
        let row = coloured.lines().nth(1).unwrap();
        assert!(
            row.contains(&format!("{}failed{}", style.render(), style.render_reset())),
            "{row:?}"
        );
        let unstyled = row
            .replace(&style.render().to_string(), "")
            .replace(&style.render_reset().to_string(), "");
        assert_eq!(unstyled, plain.lines().nth(1).unwrap());
    }

    #[test]
    fn a_cell_cannot_break_the_table_or_drive_the_terminal() {
        let mut table = Table::new(&["COMMAND"]);
        table.push(vec!["echo a\nb \u{1b}[31m".into()]);
        let text = written(&table, false);
        assert_eq!(text.lines().count(), 2, "{text:?}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains(r"echo a\nb \u{1b}[31m"), "{text:?}");
    }
}
