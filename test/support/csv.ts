/**
 * A strict RFC 4180 reader for the tests: records end in CRLF, a field is either bare (no comma,
 * quote, CR or LF) or quoted with quotes doubled. Anything else throws, so an export that escapes
 * badly fails the test instead of being read leniently.
 */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let i = 0;
  const fail = (message: string) => {
    throw new Error(`CSV at ${i}: ${message}`);
  };
  while (i < text.length) {
    let field = '';
    if (text[i] === '"') {
      i += 1;
      for (;;) {
        if (i >= text.length) fail('unterminated quoted field');
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            field += '"';
            i += 2;
            continue;
          }
          i += 1;
          break;
        }
        field += text[i++];
      }
    } else {
      while (i < text.length && text[i] !== ',' && text[i] !== '\r') {
        if (text[i] === '"' || text[i] === '\n') fail('quote or line feed in a bare field');
        field += text[i++];
      }
    }
    row.push(field);
    if (text[i] === ',') {
      i += 1;
    } else if (text[i] === '\r' && text[i + 1] === '\n') {
      rows.push(row);
      row = [];
      i += 2;
    } else {
      fail('expected a comma or CRLF after a field');
    }
  }
  if (row.length) fail('the last record does not end in CRLF');
  return rows;
}
