package model

import "strings"

// ParameterGroups splits NumParameters by where the weights sit: the
// embedding (with the LM head when it is not tied), one decoder layer (all
// layers have the same), and the final norm, so that
//
//	NumParameters = embedding + NumHiddenLayers·perLayer + final
//
// (the groups an optimizer update can take one at a time).
func (c *Config) ParameterGroups() (embedding, perLayer, final int64) {
	for _, s := range tensorSpecs(c) {
		n := int64(1)
		for _, d := range s.shape {
			n *= int64(d)
		}
		switch {
		case strings.HasPrefix(s.name, "model.layers.0."):
			perLayer += n
		case strings.HasPrefix(s.name, "model.layers."):
		case s.name == "model.norm.weight":
			final += n
		default: // model.embed_tokens.weight, lm_head.weight
			embedding += n
		}
	}
	return embedding, perLayer, final
}
