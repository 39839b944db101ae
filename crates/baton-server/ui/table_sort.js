// Sorting a table's loaded rows by a column, as a click on its heading asks: the rows
// the page holds, not the server's whole list (that one's order is the list's `order`).
// No imports, so the unit tests load it as it is.

/// `rows` sorted by the value `keyOf(row)` gives — a number, a string, or null/undefined
/// for none, which goes last either way — ascending, or descending with `descending`.
/// Stable: rows with equal values keep the server's order.
export function sortRows(rows, keyOf, descending = false) {
  const sign = descending ? -1 : 1;
  return rows
    .map((row, index) => ({ row, index, key: keyOf(row) }))
    .sort((a, b) => {
      const aNone = a.key === null || a.key === undefined || Number.isNaN(a.key);
      const bNone = b.key === null || b.key === undefined || Number.isNaN(b.key);
      if (aNone || bNone) return aNone === bNone ? a.index - b.index : aNone ? 1 : -1;
      let order;
      if (typeof a.key === 'number' && typeof b.key === 'number') order = a.key - b.key;
      else order = String(a.key).localeCompare(String(b.key), undefined, { numeric: true, sensitivity: 'base' });
      return order * sign || a.index - b.index;
    })
    .map(({ row }) => row);
}

/// The address's `sort` value (`created`, `-created` for descending) as
/// `{ column, descending }`, or null.
export function parseSort(text) {
  if (!text) return null;
  const descending = text.startsWith('-');
  return { column: descending ? text.slice(1) : text, descending };
}

export function sortText({ column, descending }) {
  return `${descending ? '-' : ''}${column}`;
}
