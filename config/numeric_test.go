package config

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/rollout"
)

// numericKeys lists the dotted keys of every integer and float field of a
// configuration struct type, walked by eachKey as knownKeys is: a key added
// later is listed without a line of its own.
func numericKeys(t reflect.Type) []string {
	var keys []string
	eachKey(t, "", func(key string, ft reflect.Type) {
		if k := ft.Kind(); isInt(k) || k == reflect.Float32 || k == reflect.Float64 {
			keys = append(keys, key)
		}
	})
	return keys
}

// valueAt returns the field of v at a dotted key.
func valueAt(t *testing.T, v reflect.Value, key string) reflect.Value {
	t.Helper()
	for _, part := range strings.Split(key, ".") {
		f, ok := fieldByTag(v, part)
		if !ok {
			t.Fatalf("%s: no field %q", key, part)
		}
		v = f
	}
	return v
}

// TestEveryNumericKeyInRange sets every numeric key of the configuration to
// NaN, ±Inf, 1e300, −1 and 0: each is either refused with an error naming
// the key, or accepted at a value in its unit's range — finite and within
// float32's, a duration that cannot overflow, a temperature that cannot
// overflow float32 logits.
func TestEveryNumericKeyInRange(t *testing.T) {
	keys := numericKeys(reflect.TypeOf(Config{}))
	for _, want := range []string{"serve.deadline_s", "rollout.temperature", "rollout.top_p", "rollout.remote_timeout_s", "eval.vote_temperature", "model.lora.alpha", "train.steps", "mcp.max_list_bytes"} {
		found := false
		for _, k := range keys {
			found = found || k == want
		}
		if !found {
			t.Fatalf("the walk missed %s (found %d keys)", want, len(keys))
		}
	}
	for _, key := range keys {
		for _, value := range []string{".nan", ".inf", "-.inf", "1e300", "-1", "0"} {
			cfg := Default()
			err := Set(cfg, key+"="+value)
			if err == nil {
				err = Validate(cfg)
			}
			if err != nil {
				if !strings.Contains(err.Error(), key) {
					t.Errorf("%s=%s: the error does not name the key: %v", key, value, err)
				}
				continue
			}
			checkInRange(t, key, value, valueAt(t, reflect.ValueOf(cfg).Elem(), key))
		}
	}
}

// checkInRange asserts what an accepted value must satisfy whatever its key.
func checkInRange(t *testing.T, key, value string, v reflect.Value) {
	t.Helper()
	var f float64
	switch {
	case v.Kind() == reflect.Float32 || v.Kind() == reflect.Float64:
		f = v.Float()
	case v.CanInt():
		f = float64(v.Int())
	default:
		f = float64(v.Uint())
	}
	if math.IsNaN(f) || math.Abs(f) > math.MaxFloat32 {
		t.Errorf("%s=%s accepted as %v: not a finite float32", key, value, f)
	}
	leaf := key[strings.LastIndex(key, ".")+1:]
	// A duration, with an hour of margin for what callers add to it.
	unit := map[string]float64{"_s": float64(time.Second), "_ms": float64(time.Millisecond)}
	for suffix, ns := range unit {
		if strings.HasSuffix(leaf, suffix) && (f < 0 || f*ns+float64(time.Hour) >= math.MaxInt64) {
			t.Errorf("%s=%s accepted as %v: not a duration time.Duration holds", key, value, f)
		}
	}
	if strings.Contains(leaf, "temperature") && !(f >= rollout.MinTemperature && f <= rollout.MaxTemperature) {
		t.Errorf("%s=%s accepted as %v: outside [%g, %g]", key, value, f, rollout.MinTemperature, rollout.MaxTemperature)
	}
	if leaf == "top_p" && !(f > 0 && f <= 1) {
		t.Errorf("%s=%s accepted as %v: not a probability in (0, 1]", key, value, f)
	}
}

// TestSettingsThatDisabledTheGuard: values that once passed validation and
// broke serving or sampling are refused, naming the key.
func TestSettingsThatDisabledTheGuard(t *testing.T) {
	for _, kv := range []string{
		"serve.deadline_s=1e10",     // overflowed time.Duration: every assess a 503 in 0 s
		"serve.session_idle_s=1e12", // the same arithmetic
		"rollout.temperature=1e-45", // logits / temperature overflowed float32: every sampled step a 500
		"rollout.temperature=.inf",  // every sampled decision a coin flip
		"rollout.top_p=.nan",        // passed the old (0, 1] check
		"rollout.remote_timeout_s=1e300",
		"eval.vote_temperature=.nan",
		"model.lora.alpha=.nan", // passed with lora.rank 0 (the walk over every float key refuses it)
		"model.seed=-.inf",      // decoded into an undefined integer
		"model.parallelism=-2",
	} {
		key, _, _ := strings.Cut(kv, "=")
		_, err := Load("", []string{kv})
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: got %v, want an error naming %s", kv, err, key)
		}
	}
}
