// Reference GPT-2 encodings from the npm package gpt-3-encoder, for tokenizer_test.cc.
// usage: node encode_reference.js <package dir> <strings.json>
//   strings.json holds a JSON array of strings; prints one JSON array of token-id arrays.
'use strict';
const fs = require('fs');
const path = require('path');

if (process.argv.length !== 4) {
  process.stderr.write('usage: node encode_reference.js <gpt-3-encoder dir> <strings.json>\n');
  process.exit(2);
}
const encoder = require(path.resolve(process.argv[2]));
const strings = JSON.parse(fs.readFileSync(process.argv[3], 'utf-8'));
if (!Array.isArray(strings)) {
  process.stderr.write('encode_reference.js: expected a JSON array of strings\n');
  process.exit(2);
}
process.stdout.write(JSON.stringify(strings.map((s) => encoder.encode(s))) + '\n');
