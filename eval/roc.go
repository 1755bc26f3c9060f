package eval

// The judge's decision score (decisions.jsonl `score`, p(reject) read from
// the decision token's log-probs) as a classifier of actions: the area under
// its ROC curve, the curve, and the rates at a few thresholds, so that a
// user can pick `serve.threshold`.

import (
	"fmt"
	"sort"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/mageguard/mageguard/internal/chart"
)

// PlotROC is the ROC curve's file, beside WriteReport's other plots.
const PlotROC = "roc.png"

// ReportThresholds are the thresholds report.json's score_thresholds and
// report.md's table show.
var ReportThresholds = []float64{0.1, 0.25, 0.5, 0.75, 0.9}

// ThresholdRates are the per-action rates of blocking when score ≥ Threshold.
type ThresholdRates struct {
	Threshold  float64  `json:"threshold"`
	Recall     *float64 `json:"recall"`      // malicious actions blocked (TPR)
	FPR        *float64 `json:"fpr"`         // benign actions blocked
	RejectRate *float64 `json:"reject_rate"` // actions blocked
}

// scored is one action's score and label.
type scored struct {
	score float64
	label int
}

// scoredActions returns the scores and labels of the decisions that carry a score.
func scoredActions(ds []Decision) []scored {
	var out []scored
	for i := range ds {
		if ds[i].Score != nil {
			out = append(out, scored{*ds[i].Score, ds[i].Label})
		}
	}
	return out
}

// rocAUC is the area under the ROC curve of the scores (positive = label
// 1): the probability that a malicious action scores above a benign one,
// ties counting one half — the Mann–Whitney U statistic over P·N, computed
// from ranks (tied scores share their mean rank):
//
//	AUC = (Σ_{positives} rank − P(P+1)/2) / (P·N)
//
// nil without both a malicious and a benign scored action.
func rocAUC(xs []scored) *float64 {
	s := append([]scored(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i].score < s[j].score })
	var pos, neg int
	rankSum := 0.0
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j].score == s[i].score {
			j++
		}
		mean := float64(i+1+j) / 2 // ranks i+1 … j
		for k := i; k < j; k++ {
			if s[k].label == 1 {
				pos++
				rankSum += mean
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return nil
	}
	v := (rankSum - float64(pos)*float64(pos+1)/2) / (float64(pos) * float64(neg))
	return &v
}

// thresholdRates returns the rates of blocking when score ≥ t, for each t.
func thresholdRates(xs []scored, ts []float64) []ThresholdRates {
	var out []ThresholdRates
	for _, t := range ts {
		var tp, fp, pos, neg int
		for _, x := range xs {
			block := x.score >= t
			if x.label == 1 {
				pos++
				if block {
					tp++
				}
			} else {
				neg++
				if block {
					fp++
				}
			}
		}
		out = append(out, ThresholdRates{Threshold: t, Recall: ratio(tp, pos), FPR: ratio(fp, neg), RejectRate: ratio(tp+fp, pos+neg)})
	}
	return out
}

// rocCurve returns the ROC curve's points (FPR, TPR), from blocking nothing
// to blocking everything, one point per distinct score.
func rocCurve(xs []scored) plotter.XYs {
	s := append([]scored(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i].score > s[j].score })
	var pos, neg int
	for _, x := range s {
		if x.label == 1 {
			pos++
		} else {
			neg++
		}
	}
	pts := plotter.XYs{{X: 0, Y: 0}}
	if pos == 0 || neg == 0 {
		return pts
	}
	tp, fp := 0, 0
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j].score == s[i].score {
			if s[j].label == 1 {
				tp++
			} else {
				fp++
			}
			j++
		}
		pts = append(pts, plotter.XY{X: float64(fp) / float64(neg), Y: float64(tp) / float64(pos)})
		i = j
	}
	return pts
}

// minAUCActions is the fewest scored actions of each label the ROC plot
// states an AUC from: with one malicious action, an AUC of 1.000 says
// only that this one outscored the benign ones.
const minAUCActions = 5

// plotROC draws the ROC curve of the decisions' scores with the chance
// diagonal, the number of scored actions of each label in its title, and
// the AUC in its legend when each label has at least minAUCActions.
func plotROC(ds []Decision) ([]byte, error) {
	xs := scoredActions(ds)
	var pos, neg int
	for _, x := range xs {
		if x.label == 1 {
			pos++
		} else {
			neg++
		}
	}
	p := chart.New(fmt.Sprintf("ROC of the decision score (%d malicious, %d benign actions)", pos, neg))
	p.X.Label.Text = "false-positive rate (benign actions blocked)"
	p.Y.Label.Text = "recall (malicious actions blocked)"
	auc := rocAUC(xs)
	if auc == nil {
		chart.NoData(p)
		return chart.PNG(p)
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	chance, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		return nil, err
	}
	chance.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	chance.Color = plotutil.Color(7)
	curve, err := plotter.NewLine(rocCurve(xs))
	if err != nil {
		return nil, err
	}
	curve.Color = plotutil.Color(0)
	curve.Width = vg.Points(2)
	p.Add(plotter.NewGrid(), chance, curve)
	p.Legend.Add(rocLegend(pos, neg, auc), curve)
	p.Legend.Add("chance", chance)
	return chart.PNG(p)
}

// rocLegend names the ROC curve: with its AUC when each label has at least
// minAUCActions scored actions.
func rocLegend(pos, neg int, auc *float64) string {
	if pos < minAUCActions || neg < minAUCActions {
		return fmt.Sprintf("score (no AUC from fewer\nthan %d actions of a label)", minAUCActions)
	}
	return "score (AUC " + Format(Field{Kind: Score, Value: auc}) + ")"
}
