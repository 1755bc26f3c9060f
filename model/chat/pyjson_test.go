package chat

import "testing"

// TestPyJSON compares with Python 3's json.dumps(json.loads(in),
// ensure_ascii=False), whose outputs are pasted here.
func TestPyJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1,"a":[1.50,2e3,"x\u00e9\n\"<>&\u2028\u001f\u007f"],"c":{},"d":[],"e":null,"f":true,"b":2}`,
			"{\"b\": 2, \"a\": [1.5, 2000.0, \"x\u00e9\\n\\\"<>&\u2028\\u001f\u007f\"], \"c\": {}, \"d\": [], \"e\": null, \"f\": true}"},
		{`[0.1, 1e-5, 0.0001, 1e16, 1e15, 123456789012345678901234567890, -0.0, -0, 1.0e400, -2.5E-7, 3.14159]`,
			"[0.1, 1e-05, 0.0001, 1e+16, 1000000000000000.0, 123456789012345678901234567890, -0.0, 0, Infinity, -2.5e-07, 3.14159]"},
		{`{"k": "tab\there\\back\/slash", "emoji": "\ud83d\ude00", "ctl": "\b\f\r"}`,
			"{\"k\": \"tab\\there\\\\back/slash\", \"emoji\": \"😀\", \"ctl\": \"\\b\\f\\r\"}"},
	}
	for _, c := range cases {
		got, err := pyJSON([]byte(c.in))
		if err != nil {
			t.Errorf("pyJSON(%s): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("pyJSON(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{`{"a":}`, `{"a":1} x`, ``, `[1,`} {
		if _, err := pyJSON([]byte(bad)); err == nil {
			t.Errorf("pyJSON(%q): no error", bad)
		}
	}
}
