package expr

// Op is what a node of a compiled Tree does.
type Op uint8

// The operations of a Tree node. The zero value is OpLeaf.
const (
	OpLeaf Op = iota // the node's Leaf decides
	OpAnd            // every kid holds
	OpOr             // some kid holds
	OpNot            // Kids[0] does not hold
)

// Tree is an expression compiled for evaluation: its &&, || and ! as nodes,
// each matcher call as a leaf of the caller's type L (a router rule's
// matcher in proxy/rule, a constraint's in provider/constraints). The
// boolean structure is written once, here; a caller writes only what its
// leaves are and how one is matched.
type Tree[L any] struct {
	Op   Op
	Kids []Tree[L] // the operands of OpAnd and OpOr (two or more) and of OpNot (one)
	Leaf L         // an OpLeaf's matcher
}

// Compile builds the Tree of the parsed n, making the leaf of each call with
// leaf (which may also check the call and modify n, e.g. to canonicalise
// its Name). It returns the first error leaf returns.
func Compile[L any](n *Node, leaf func(*Node) (L, error)) (Tree[L], error) {
	var t Tree[L]
	switch n.Kind {
	case And:
		t.Op = OpAnd
	case Or:
		t.Op = OpOr
	case Not:
		t.Op = OpNot
	default:
		l, err := leaf(n)
		t.Leaf = l
		return t, err
	}
	t.Kids = make([]Tree[L], len(n.Kids))
	for i, k := range n.Kids {
		var err error
		if t.Kids[i], err = Compile(k, leaf); err != nil {
			return t, err
		}
	}
	return t, nil
}

// Eval reports whether t holds, asking match about the leaves it reaches:
// && and || stop at the first operand that decides. It allocates nothing
// of its own.
func (t *Tree[L]) Eval(match func(*L) bool) bool {
	switch t.Op {
	case OpAnd:
		for i := range t.Kids {
			if !t.Kids[i].Eval(match) {
				return false
			}
		}
		return true
	case OpOr:
		for i := range t.Kids {
			if t.Kids[i].Eval(match) {
				return true
			}
		}
		return false
	case OpNot:
		return !t.Kids[0].Eval(match)
	}
	return match(&t.Leaf)
}
